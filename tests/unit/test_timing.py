"""Per-handler timing (supervisor/timing.py): buckets, the child's tally, the master's
absorbing of its lines, and percentiles read from merged histograms."""

from __future__ import annotations

import itertools
import random

import pytest

from supervisor.timing import (
    BOUNDS,
    BUCKETS,
    MOST_HANDLERS,
    OTHER,
    Stats,
    Tally,
    absorb,
    merge,
    percentile,
)


def stats_of(durations: list[float], failed: int = 0) -> Stats:
    tally = Tally()
    for i, d in enumerate(durations):
        tally.add("h", d, i < failed)
    into: dict[str, Stats] = {}
    absorb(into, tally.encode())
    return into["h"]


def test_buckets_are_log_spaced_a_factor_two_apart_from_one_millisecond() -> None:
    assert BUCKETS == 24 and BOUNDS[0] == 0.001
    assert all(b / a == pytest.approx(2.0) for a, b in itertools.pairwise(BOUNDS))
    assert BOUNDS[-1] > 3600  # about 70 minutes: anything longer shares the last bucket


def test_the_tally_counts_per_handler_and_starts_afresh_after_each_line() -> None:
    tally = Tally()
    tally.add("a", 0.0005, False)  # under 1 ms: bucket 0
    tally.add("a", 0.0015, True)  # 1-2 ms: bucket 1
    tally.add("b", 5000.0, False)  # past the last bound
    into: dict[str, Stats] = {}
    absorb(into, tally.encode())
    assert tally.encode() == ""  # nothing gathered since
    a, b = into["a"], into["b"]
    assert (a.jobs, a.failed, a.fastest, a.slowest) == (2, 1, 0.0005, 0.0015)
    assert a.buckets[:2] == [1, 1] and sum(a.buckets) == 2
    assert b.buckets[-1] == 1 and a.seconds == pytest.approx(0.002)


def test_lines_from_several_children_add_up_and_a_bad_line_is_dropped() -> None:
    into: dict[str, Stats] = {}
    for seconds in (0.1, 0.3):
        tally = Tally()
        tally.add("h", seconds, seconds > 0.2)
        absorb(into, tally.encode())
    absorb(into, "not json")
    absorb(into, '{"h": [1, 2]}')
    assert (into["h"].jobs, into["h"].failed, into["h"].fastest, into["h"].slowest) == (
        2,
        1,
        0.1,
        0.3,
    )
    assert into["h"].failure_rate == 0.5


def test_a_child_names_at_most_so_many_handlers_the_rest_add_up_as_other() -> None:
    tally = Tally()
    for i in range(MOST_HANDLERS + 5):
        tally.add(f"h{i}", 0.01, False)
    into: dict[str, Stats] = {}
    absorb(into, tally.encode())
    assert len(into) == MOST_HANDLERS + 1 and into[OTHER].jobs == 5


def test_durations_all_in_one_bucket_come_out_between_the_fastest_and_slowest() -> None:
    # 100 ms sits in the [64 ms, 128 ms) bucket; the estimate does not wander across it.
    s = stats_of([0.100, 0.101, 0.102, 0.103])
    for q in (0.5, 0.95):
        assert 0.100 <= (s.percentile(q) or 0) <= 0.103


def test_percentiles_of_a_spread_are_within_a_bucket_of_the_truth() -> None:
    rng = random.Random(7)
    durations = [rng.lognormvariate(-3, 1.2) for _ in range(5000)]
    s = stats_of(durations)
    ordered = sorted(durations)
    for q in (0.5, 0.95, 0.99):
        truth = ordered[int(q * len(ordered)) - 1]
        estimate = s.percentile(q) or 0.0
        assert truth / 2 <= estimate <= truth * 2, (q, truth, estimate)
        assert estimate == pytest.approx(truth, rel=0.25)


def test_merged_histograms_give_the_percentiles_of_the_whole() -> None:
    fast = stats_of([0.010] * 90)
    slow = stats_of([1.0] * 10, failed=10)
    [(handler, whole)] = merge([("h", fast), ("h", slow)]).items()
    assert handler == "h" and whole.jobs == 100 and whole.failure_rate == pytest.approx(0.1)
    assert 0.010 <= (whole.percentile(0.5) or 0) < 0.016  # within its bucket, past the fastest
    assert 0.5 <= (whole.percentile(0.95) or 0) <= 1.0
    assert whole.percentile(1.0) == pytest.approx(1.0)


def test_no_attempts_no_percentile() -> None:
    assert percentile([0] * BUCKETS, 0.5) is None
    assert Stats().percentile(0.95) is None and Stats().failure_rate == 0.0


def test_the_chart_places_one_point_per_minute_with_its_percentiles_and_failure_rate() -> None:
    from supervisor.timing import seconds_text
    from supervisor.web.timing_chart import timing_chart

    now = 36_000.0
    ok = stats_of([0.1] * 3)
    bad = stats_of([0.4, 0.4], failed=1)
    chart = timing_chart([(now - 120, ok), (now - 60, bad), (now - 7200, ok)], now, 1)
    assert [p.fail_h > 0 for p in chart.points] == [False, True]  # the 2-hour-old row is out
    assert chart.jobs == 5 and chart.points[0].p50_y > chart.points[1].p50_y  # slower: higher
    assert "2 attempts, 1 failed (50%)" in chart.points[1].title
    assert chart.duration_ticks[0].label == "0" and chart.rate_ticks[-1].label == "100 %"
    assert [seconds_text(v) for v in (None, 0.0004, 0.085, 1.2, 300)] == [
        "-",
        "0.40 ms",
        "85 ms",
        "1.2 s",
        "5 min",
    ]
