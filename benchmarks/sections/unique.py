"""Section unique: `Queue.enqueue` with a unique key and a window against the same loop
without a key, rounds alternating; and enqueues that conflict (a debounce storm)."""

from __future__ import annotations

import statistics
import time

from harness import Bench, Deadline

from supervisor import Queue


def _round(q: Queue, per_round: int, start: int, windowed: bool) -> float:
    """Seconds for `per_round` single enqueues, each with its own key and window or none."""
    started = time.perf_counter()
    for i in range(start, start + per_round):
        if windowed:
            q.enqueue("bench.noop", {"i": i}, unique_key=f"u{i}", unique_for=3600)
        else:
            q.enqueue("bench.noop", {"i": i})
    return time.perf_counter() - started


def run(bench: Bench, deadline: Deadline) -> None:
    """Plain and windowed enqueues alternate in short rounds, each going first in every
    other round; the ratio is the median of the rounds' ratios."""
    s = bench.s
    bench.b.reset()
    q = Queue(bench.b.admin_url, wake=False)
    try:
        q.enqueue("bench.noop", {"warm": True})  # connect outside the clock
        rounds = 20
        per_round = s.enqueue_single // rounds
        plain_s = windowed_s = 0.0
        ratios = []
        for r in range(rounds):
            first, second = (True, False) if r % 2 else (False, True)
            took = {first: _round(q, per_round, 2 * r * per_round, first)}
            took[second] = _round(q, per_round, (2 * r + 1) * per_round, second)
            plain_s += took[False]
            windowed_s += took[True]
            ratios.append(took[True] / took[False])
            deadline.check("enqueuing with and without a window")
        n = rounds * per_round
        bench.fig("unique", f"Queue.enqueue, no unique key (n={n:,})", n / plain_s, "jobs/s")
        bench.fig(
            "unique", f"Queue.enqueue, unique_key + unique_for=3600 (n={n:,})", n / windowed_s,
            "jobs/s",
        )  # fmt: skip
        bench.fig(
            "unique",
            f"windowed / plain enqueue time, median of {rounds} alternating rounds",
            statistics.median(ratios),
            "x",
            target=("<=", 1.2),
        )
        started = time.perf_counter()
        for i in range(n):
            q.enqueue("bench.noop", {"i": i}, unique_key="storm", delay=5,
                      on_conflict="debounce", debounce_max=60)  # fmt: skip
        bench.fig(
            "unique",
            f"debounced enqueues of one key (n={n:,}, all but the first conflict)",
            n / (time.perf_counter() - started),
            "jobs/s",
        )
    finally:
        q.close()
        bench.b.reset()


METHOD = [
    "- **unique**: `Queue.enqueue` in a loop (one commit each, no wake-up datagram), each job"
    " with its own `unique_key` and `unique_for=3600` (the insert_job_unique statement and the"
    " UNIQUE index on (unique_key, unique_live)) against the same loop without a key, in 20"
    " alternating rounds; the ratio is the median of the rounds' time ratios. Then the same"
    ' number of enqueues of one key with `on_conflict="debounce"`: one job, every later'
    " enqueue an update of it.",
]
