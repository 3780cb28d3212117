"""Flow control's pure decisions (supervisor/store/limits/buckets.py) and its config, at fixed times."""

from __future__ import annotations

import bisect
import itertools
import random

import pytest

from supervisor.config import LimitConfig, Rate, build_config
from supervisor.errors import ConfigError, Snooze
from supervisor.store.limits.buckets import (
    RECHECK,
    Bucket,
    Candidate,
    LimitPlan,
    decide,
    room_in,
    wake_at,
)
from supervisor.store.limits.rates import WINDOW_SLICES, RateWindow, rate_hold, slice_us
from supervisor.work.snooze import SNOOZED, snooze_outcome, snooze_request

MAIL = LimitConfig(
    "mail", handlers=("email.send",), concurrency=5, rate=Rate(100, 60.0), per_key=True
)
QUEUE_LIMIT = LimitConfig("reports", queues=("reports",), concurrency=2)


# --- the config ---------------------------------------------------------------------------------


def limits_of(table: dict[str, object]) -> tuple[LimitConfig, ...]:
    return build_config({"limits": table}, "forkq.toml").limits


def test_a_limit_in_a_few_lines_of_config() -> None:
    [limit] = limits_of(
        {
            "mailgun": {
                "handlers": ["email.send"],
                "concurrency": 5,
                "rate": "100/1m",
                "per_key": True,
            }
        }
    )
    assert limit == LimitConfig("mailgun", ("email.send",), (), 5, Rate(100, 60.0), True)
    assert str(limit.rate) == "100/1m"


@pytest.mark.parametrize(
    ("text", "count", "seconds"),
    [("100/1m", 100, 60.0), ("5/2s", 5, 2.0), ("1000/h", 1000, 3600.0), ("7/ 30s", 7, 30.0)],
)
def test_rates_are_n_per_a_duration(text: str, count: int, seconds: float) -> None:
    [limit] = limits_of({"x": {"queues": ["q"], "rate": text}})
    assert limit.rate == Rate(count, seconds)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"x": {"concurrency": 5}}, "limits.x: covers nothing"),
        ({"x": {"handlers": [], "queues": [], "concurrency": 5}}, "limits.x: covers nothing"),
        ({"x": {"queues": ["q"]}}, "limits.x: limits nothing"),
        ({"x": {"queues": ["q"], "concurrency": 0}}, "limits.x.concurrency: must be at least 1"),
        ({"x": {"queues": ["q"], "rate": "100"}}, 'limits.x.rate: expected "N/PERIOD"'),
        ({"x": {"queues": ["q"], "rate": "0/1m"}}, "limits.x.rate: N must be at least 1"),
        ({"x": {"queues": ["q"], "rate": "5/500ms"}}, "limits.x.rate: the period must be"),
        ({"x": {"queues": ["q"], "rate": 5}}, "limits.x.rate: expected a string"),
        (
            {"x": {"queues": ["q"], "concurrency": 1, "per_tenant": True}},
            "limits.x.per_tenant: unknown key",
        ),
        (
            {"x": {"queues": ["q"], "concurrency": 1, "per_key": "yes"}},
            "limits.x.per_key: expected true",
        ),
        ({"a/b": {"queues": ["q"], "concurrency": 1}}, "limits.a/b: a limit name has"),
        ({"x": 3}, "limits.x: expected a table"),
    ],
)
def test_a_wrong_limit_is_refused_with_its_key_and_exit_78(
    table: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        limits_of(table)
    assert caught.value.exit_code == 78
    assert f"forkq.toml: {message}" in str(caught.value)


def test_every_wrong_limit_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        limits_of(
            {"a": {"concurrency": 1}, "b": {"queues": ["q"]}, "c": {"queues": ["q"], "bad": 1}}
        )
    assert [line.split(":")[1].strip() for line in str(caught.value).splitlines()] == [
        "limits.a",
        "limits.b",
        "limits.c.bad",
        "limits.c",  # and it limits nothing either
    ]


# --- buckets ------------------------------------------------------------------------------------


def test_a_job_falls_in_the_buckets_of_its_handler_and_its_queue() -> None:
    plan = LimitPlan([MAIL, QUEUE_LIMIT], {"email.send": "email", "reports.pdf": "reports"})
    assert plan.buckets_for("email.send", "email", "acme") == (Bucket("mail", "acme"),)
    assert plan.buckets_for("email.send", "email", None) == (Bucket("mail", ""),)
    assert plan.buckets_for("email.send", "reports", "acme") == (
        Bucket("mail", "acme"),
        Bucket("reports", ""),  # not per_key: one bucket whatever the key
    )
    assert plan.buckets_for("other", "email", "acme") == ()
    assert plan.limited_queues == {"email", "reports"}


def test_bucket_ids_round_trip_and_sort_in_lock_order() -> None:
    buckets = [Bucket("mail", "b/c"), Bucket("mail", ""), Bucket("api", "z"), Bucket("mail", "a")]
    assert [Bucket.parse(b.id) for b in buckets] == buckets
    assert [b.id for b in sorted(buckets)] == ["api/z", "mail", "mail/a", "mail/b/c"]


def test_running_jobs_are_counted_per_bucket_from_the_usage_rows() -> None:
    plan = LimitPlan([MAIL, QUEUE_LIMIT], {})
    usage: list[dict[str, object]] = [
        {"handler": "email.send", "queue": "email", "limit_key": "acme", "n": 3},
        {"handler": "email.send", "queue": "reports", "limit_key": "acme", "n": 1},
        {"handler": "email.send", "queue": "email", "limit_key": None, "n": 2},
        {"handler": "other", "queue": "email", "limit_key": "acme", "n": 9},
    ]
    wanted = [Bucket("mail", "acme"), Bucket("mail", ""), Bucket("reports")]
    assert plan.running(usage, wanted) == {
        Bucket("mail", "acme"): 4,
        Bucket("mail", ""): 2,
        Bucket("reports"): 1,
    }


# --- decisions ----------------------------------------------------------------------------------

A, B = Bucket("mail", "a"), Bucket("mail", "b")


def rows(*buckets: tuple[Bucket, ...]) -> list[Candidate]:
    return [Candidate(i, b, (0, 0.0, i)) for i, b in enumerate(buckets, 1)]


def test_jobs_run_in_order_while_their_bucket_has_room_and_the_rest_are_parked() -> None:
    decision = decide(rows((A,), (B,), (A,), (), (A,), (B,)), {A: 1, B: 0})
    assert decision.run == [1, 4]
    assert decision.park == {A: [3, 5], B: [2, 6]}
    assert decision.started == {A: 1}


def test_jobs_behind_the_first_never_fill_a_bucket() -> None:
    """Only a claim's first job starts at once: one behind it runs only while its bucket
    keeps, after it, as many free slots as the claim holds there. The others are skipped,
    not parked (the bucket has room: another worker takes them)."""
    decision = decide(rows((A,), (A,), (A,), (A,), (B,), (B,)), {A: 6, B: 2})
    assert decision.run == [1, 2, 3, 5]  # A: 3 held, 3 left; B: 1 held, 1 left
    assert decision.skipped == [4, 6]
    assert decision.park == {}
    first = decide(rows((B,), (B,)), {B: 1})  # a claim's first job may take the last slot
    assert (first.run, first.park) == ([1], {B: [2]})
    later = decide(rows((A,)), {A: 2}, earlier={A: 1}, claimed=1)  # a later select
    assert (later.run, later.skipped) == ([], [1])


def test_a_job_needs_room_in_every_bucket_it_falls_in() -> None:
    queue_bucket = Bucket("reports")
    decision = decide(
        rows((A, queue_bucket), (A,), (B, queue_bucket)), {A: 5, B: 5, queue_bucket: 1}
    )
    assert decision.run == [1, 2]
    assert decision.park == {queue_bucket: [3]}


def test_a_job_behind_one_parked_on_its_bucket_waits_behind_it() -> None:
    candidates = [Candidate(7, (A,), (0, 10.0, 7)), Candidate(3, (A,), (0, 1.0, 3))]
    head = {A: (0, 5.0, 5)}  # parked job 5 comes before job 7, after job 3
    decision = decide(candidates, {A: 5}, head)
    assert decision.run == [3]
    assert decision.park == {A: [7]}


def test_room_is_the_lesser_of_concurrency_and_rate_left() -> None:
    window = RateWindow.empty(slice_us(MAIL) or 0, 1000.0)
    window.record(97)
    assert room_in(MAIL, running=1, window=window) == 3
    assert room_in(MAIL, running=5, window=window) == 0
    assert room_in(QUEUE_LIMIT, running=7, window=None) == 0
    assert room_in(None, running=7, window=None) > 1000  # a limit gone from the config


# --- the rate window ----------------------------------------------------------------------------


def test_a_window_counts_starts_until_they_are_a_period_and_two_slices_old() -> None:
    length = slice_us(LimitConfig("r", queues=("q",), rate=Rate(10, 10.0)))
    assert length == 1_000_000  # a tenth of the period
    window = RateWindow.empty(length, 100.0)
    window.record(10)
    assert window.slid(109.999).used == 10
    assert window.slid(111.999).used == 10  # still in the twelfth slice
    assert window.slid(112.0).used == 0
    assert window.free_at(10) == 112.0


def test_free_at_drops_the_oldest_slices_first() -> None:
    window = RateWindow.empty(1_000_000, 100.0)
    window.record(3)
    window = window.slid(104.5)
    window.record(4)
    assert window.used == 7
    assert window.free_at(7) == 112.0  # the 3 of slice 100 leave at 112
    assert window.free_at(5) == 112.0
    assert window.free_at(3) == 116.0  # then the 4 of slice 104


def test_no_span_of_one_period_ever_holds_more_than_the_rate() -> None:
    """Claims at random times, each starting what the window allows: in every span of one
    period, at most N starts. A property over a seeded random schedule."""
    rate = Rate(7, 3.0)
    length = slice_us(LimitConfig("r", queues=("q",), rate=rate)) or 0
    rng = random.Random(15)
    now, window, starts = 1000.0, RateWindow.empty(length, 1000.0), []
    for _ in range(3000):
        now += rng.expovariate(20.0)
        window = window.slid(now)
        allowed = min(rng.randint(1, 4), max(0, rate.count - window.used))
        window.record(allowed)
        starts += [now] * allowed
    assert len(starts) > 300  # the window was full most of the time
    worst = max(
        sum(1 for s in itertools.islice(starts, i, None) if s < first + rate.period)
        for i, first in enumerate(starts)
    )
    assert worst == rate.count


def test_handler_starts_within_the_hold_of_their_claim_never_pass_the_rate() -> None:
    """Claims at random times take what the window allows, held jobs among them; each job
    starts at once or a whole slice after the instant its claim counted it (the hold,
    half a slice from when the claim had its bucket's row back, and as long again for
    that answer's trip). In every span of one period, at most N handler starts. (A
    window of eleven slices, the period and the slice now running, lets 4 and 5 through
    in this schedule.)"""
    limit = LimitConfig("r", queues=("q",), rate=Rate(3, 1.0))
    length, hold = slice_us(limit) or 0, rate_hold(limit) or 0.0
    assert hold == 0.05  # half a slice
    rng = random.Random(28)
    now, window, starts = 1000.0, RateWindow.empty(length, 1000.0), []
    for _ in range(3000):
        now += rng.expovariate(3.0)
        window = window.slid(now)
        allowed = min(rng.randint(0, 2), max(0, 3 - window.used))
        window.record(allowed)
        starts += [now + rng.choice((0.0, 2 * hold)) for _ in range(allowed)]  # the extremes
    starts.sort()
    assert len(starts) > 1000
    assert max(bisect.bisect_left(starts, s + 1.0) - i for i, s in enumerate(starts)) == 3


def test_a_row_of_eleven_slices_keeps_its_starts_where_they_fell() -> None:
    """Rows written before the window reached a slice further back hold eleven slices:
    read by slice numbers, each start still leaves when its slice does."""
    old = (1_000_000, 90, ",".join(["0"] * 10 + ["4"]))  # 4 starts in slice 100
    window = RateWindow.load(1_000_000, old, 100.5)
    assert (window.used, window.counts[-1]) == (4, 4)
    assert RateWindow.load(1_000_000, old, 111.5).used == 4
    assert RateWindow.load(1_000_000, old, 112.0).used == 0
    ahead = RateWindow.load(1_000_000, (1_000_000, 95, "0,0,0,0,0,0,0,0,0,0,0,3"), 100.5)
    assert (ahead.used, ahead.counts[-1]) == (3, 3)  # the clock went back: counted as now


def test_jobs_of_a_bucket_with_a_rate_are_held_while_it_keeps_room() -> None:
    """A rate's jobs are held like any: while the bucket keeps, after each, as much room
    as the claim holds there (the worker starts them within rate_hold, or hands them
    back)."""
    plan = LimitPlan([MAIL], {})
    assert plan.hold_for("email.send", "email", "acme") == 3.0  # 100/1m: half of 6 s
    assert plan.hold_for("other", "email", None) is None
    decision = decide(rows((A,), (A,), (A,), (A,)), {A: 6})
    assert decision.run == [1, 2, 3] and decision.skipped == [4]


def test_a_stored_window_slides_and_a_changed_period_carries_its_starts_over() -> None:
    window = RateWindow.empty(1_000_000, 100.0)
    window.record(6)
    stored = window.dump()
    assert stored[2].count(",") == WINDOW_SLICES - 1
    assert RateWindow.load(1_000_000, stored, 105.0).used == 6
    carried = RateWindow.load(2_000_000, stored, 105.0)  # the period was doubled
    assert (carried.slice_us, carried.used, carried.counts[-1]) == (2_000_000, 6, 6)
    assert RateWindow.load(1_000_000, (None, None, None), 105.0).used == 0
    assert RateWindow.load(1_000_000, (1_000_000, 100, "x,y"), 105.0).used == 0


def test_a_full_bucket_is_looked_at_when_its_rate_frees_a_slot_or_soon() -> None:
    window = RateWindow.empty(slice_us(MAIL) or 0, 1000.0)
    window.record(100)
    assert wake_at(MAIL, running=0, window=window, now=1000.0) == window.free_at(100)
    assert wake_at(MAIL, running=5, window=RateWindow.empty(6_000_000, 1000.0), now=1000.0) == (
        1000.0 + RECHECK
    )


# --- snooze ---------------------------------------------------------------------------------------


def test_snooze_takes_a_delay_in_seconds() -> None:
    assert Snooze(30).delay == 30.0
    for bad in (-1, float("nan"), float("inf"), "5m", True):
        with pytest.raises(ValueError, match="Snooze needs a delay"):
            Snooze(bad)  # type: ignore[arg-type]


def test_a_command_asks_for_a_snooze_on_its_last_stderr_line() -> None:
    assert snooze_request("quota of the API used up\nforkq-snooze: 5m") == (
        300.0,
        "quota of the API used up",
    )
    assert snooze_request("forkq-snooze: 30\n") == (30.0, SNOOZED)
    assert snooze_request("forkq-snooze: 30\nthen something else") is None
    assert snooze_request("forkq-snooze: soon") is None
    assert snooze_request("forkq-retry-after: 30") is None
    assert snooze_outcome(12, "waiting") == (SNOOZED, "waiting", 12.0, False)
