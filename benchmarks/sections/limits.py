"""Section limits: what a [limits.NAME] costs a drain when it is configured but not reached
(issue 15: at least 0.9 x the same drain without it).

Three `forkq run` (the tests' launcher) with one pool of W = 4 children on queue "lim",
the same but for one thing: the second has

    [limits.bench]
    queues = ["lim"]
    concurrency = 1000          # never reached: 4 workers x a claim batch of 100 at most

and the third the same limit with `rate = "100000000/1m"` too, so every claim of that
queue is a claim under limits: from forkq_jobs_limit, with the bucket's row locked (on
MariaDB a concurrency alone, far from full, is checked and counted by the claim's own
UPDATE; a rate makes it read the row FOR UPDATE first and write the window back).
They take turns, RUNS rounds; in a round each is started, warmed by a drain of 100
jobs, then times BEST_OF drains of N no-op jobs (t.noop), each from the enqueue to the
last row gone, and keeps the fastest (a stall of the shared machine hits one drain, not
the figure). A ratio is the median of the rounds' ratios. A fourth daemon, without
limits too, gives an A/A ratio: how far two identical drains differ on this machine.
On MariaDB the notes add statements and rows read per job (the bench user's counters).

    .venv/bin/python benchmarks/run.py --backends sqlite,mariadb --sections limits --no-write
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from harness import _per_job
from scale_env import daemon, running

from supervisor import Queue

QUEUE = "lim"
RUNS = 5  # rounds (the median of their ratios kept)
BEST_OF = 2  # drains per kind and round (the fastest kept)
WORKERS = 4
POLL = 0.01  # seconds between counts while a drain runs
CONCURRENCY = """
[limits.bench]
queues = ["lim"]
concurrency = 1000
"""
RATE = 'rate = "100000000/1m"\n'
KINDS = {
    "plain": ("no limits", ""),
    "again": ("no limits, again (the noise: an A/A pair)", ""),
    "concurrency": ("a concurrency limit, not reached", CONCURRENCY),
    "rate": ("a concurrency and a rate limit, not reached", CONCURRENCY + RATE),
}


def run(bench: Any, deadline: Any) -> None:
    jobs = bench.s.drain_jobs
    pool = {QUEUE: {"workers": WORKERS, "max_workers": WORKERS, "timeout": 60}}
    kinds = {}
    for kind, (_, extra) in KINDS.items():
        made = daemon(bench.workdir, bench.b.daemon_url, f"limits-{kind}", pool)
        made.write_config(text=made.config_path.read_text(encoding="utf-8") + extra)
        kinds[kind] = made
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    costs: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    queue = Queue(bench.b.admin_url)
    try:
        for number in range(RUNS):
            order = list(kinds)[number % len(kinds) :] + list(kinds)[: number % len(kinds)]
            for kind in order:  # each goes first in one round: drift hits them all
                with running(kinds[kind]):
                    drain(bench, queue, 100, deadline)  # warm: connections, page cache
                    best = 0.0
                    for _ in range(BEST_OF):
                        before = bench.b.counters()
                        best = max(best, drain(bench, queue, jobs, deadline))
                        costs[kind].append(_per_job(before, bench.b.counters(), jobs))
                    rates[kind].append(best)
    finally:
        queue.close()
    medians = {kind: statistics.median(rates[kind]) for kind in kinds}
    for kind, (title, _) in KINDS.items():
        note = (
            f"W={WORKERS}, {jobs:,} jobs a drain, best of {BEST_OF} in each of {RUNS} rounds,"
            f" median{_statements(costs[kind])}"
        )
        bench.fig("limits", f"drain with {title}", medians[kind], "jobs/s", note=note)
    for kind in ("again", "concurrency", "rate"):
        # The median of the rounds' ratios: a stall of the shared machine in one round
        # does not decide it (each round runs the three drains back to back).
        ratios = [a / b for a, b in zip(rates[kind], rates["plain"], strict=True)]
        bench.fig(
            "limits",
            f"drain with {KINDS[kind][0]} / without limits",
            statistics.median(ratios),
            "x",
            target=None if kind == "again" else (">=", 0.9),
            note="per round: " + ", ".join(f"{r:.2f}" for r in ratios),
        )


def drain(bench: Any, queue: Queue, jobs: int, deadline: Any) -> float:
    """Enqueue `jobs` no-op jobs at once; jobs per second until the last is gone."""
    started = time.perf_counter()
    for first in range(0, jobs, 1000):
        queue.enqueue_many(
            [
                {"handler": "t.noop", "payload": {"i": i}, "queue": QUEUE}
                for i in range(first, min(jobs, first + 1000))
            ]
        )
    while bench.b.count() > 0:
        deadline.check(f"draining {jobs} jobs")
        time.sleep(POLL)
    return jobs / (time.perf_counter() - started)


def _statements(costs: list[dict[str, float]]) -> str:
    """Median statements and rows read per job, where the server counts them."""
    measured = [c for c in costs if "statements_per_job" in c]
    if not measured:
        return ""
    statements = statistics.median(c["statements_per_job"] for c in measured)
    rows = statistics.median(c["rows_read_per_job"] for c in measured)
    return f"; {statements:.2f} statements/job, {rows:.1f} rows read/job"


METHOD: list[str] = []  # the figures' notes say how they are measured
