"""Section batches: a batch with a callback against the same jobs without one (issue 25).

N no-op jobs (t.noop; N = 10,000, 2,000 with --quick) enqueued in chunks of 1,000 and
worked off by one `forkq run` (the tests' launcher) with a pool of W = 4 children: plain
(enqueue_many) against the same N in one `q.batch(on_complete=...)` (b.enqueue_many),
each timed from the first enqueue to the last job gone and, for the batch, its callback
enqueued (the batch settled). The kinds take turns over RUNS rounds; the figure is the
ratio of the kinds' median times (target <= 1.2). On MariaDB the server's deadlocks and row
lock waits during the batch rounds are reported too.

    .venv/bin/python benchmarks/run.py --backends sqlite,mariadb --sections batches --no-write
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from scale_env import daemon, running

from supervisor import Queue

QUEUE = "batchq"
WORKERS = 4
RUNS = 5  # rounds: plain and batch each, taking turns on who goes first
CHUNK = 1000
POLL = 0.02


def run(bench: Any, deadline: Any) -> None:
    n = 2_000 if bench.s.is_quick else 10_000
    pool = {"workers": WORKERS, "max_workers": WORKERS, "timeout": 60}
    made = daemon(bench.workdir, bench.b.daemon_url, "batches", {QUEUE: pool})
    queue = Queue(bench.b.admin_url, wake=False)
    times: dict[str, list[float]] = {"plain": [], "batch": []}
    locks = {"Innodb_deadlocks": 0.0, "Innodb_row_lock_waits": 0.0}
    try:
        bench.b.reset()
        with running(made):
            drain(bench, queue, "plain", 100, deadline)  # warm: connections, page cache
            for number in range(RUNS):
                for kind in ("plain", "batch")[:: 1 if number % 2 == 0 else -1]:
                    before = bench.b.counters()
                    times[kind].append(drain(bench, queue, kind, n, deadline))
                    after = bench.b.counters()
                    if kind == "batch" and before and after:
                        for name in locks:
                            locks[name] += after.get(name, 0.0) - before.get(name, 0.0)
    finally:
        queue.close()
        bench.b.reset()
    report(bench, n, times, locks if bench.b.counters() is not None else None)


def drain(bench: Any, queue: Queue, kind: str, n: int, deadline: Any) -> float:
    """Seconds from the first enqueue to the last job gone (and, in a batch, it settled)."""
    specs = [{"handler": "t.noop", "queue": QUEUE}] * CHUNK
    started = time.perf_counter()
    batch_id = None
    if kind == "plain":
        for first in range(0, n, CHUNK):
            queue.enqueue_many(specs[: min(CHUNK, n - first)])
    else:
        with queue.batch(on_complete="t.noop", payload={"bench": n}) as batch:
            for first in range(0, n, CHUNK):
                batch.enqueue_many(specs[: min(CHUNK, n - first)])
        batch_id = batch.id
    while bench.b.count(f"queue = '{QUEUE}'") > 0 or not settled(queue, batch_id):
        deadline.check(f"draining {n} jobs ({kind})")
        time.sleep(POLL)
    return time.perf_counter() - started


def settled(queue: Queue, batch_id: int | None) -> bool:
    if batch_id is None:
        return True
    status = queue.batch_status(batch_id)
    return status is not None and status.settled_at is not None and "complete" in status.fired


def report(
    bench: Any, n: int, times: dict[str, list[float]], locks: dict[str, float] | None
) -> None:
    note = f"W={WORKERS}, {n:,} no-op jobs, one drain a round"
    for kind in times:
        bench.fig(
            "batches", f"drain, {kind}", n / statistics.median(times[kind]), "jobs/s", note=note
        )
    ratios = [b / p for b, p in zip(times["batch"], times["plain"], strict=True)]
    bench.fig(
        "batches",
        "time, batch with a callback / plain",
        statistics.median(times["batch"]) / statistics.median(times["plain"]),
        "x",
        target=("<=", 1.2),
        note="median times' ratio; per round: " + ", ".join(f"{r:.2f}" for r in ratios),
    )
    if locks is not None:
        bench.fig(
            "batches",
            "server deadlocks during the batch rounds",
            locks["Innodb_deadlocks"],
            "",
            note=f"row lock waits {locks['Innodb_row_lock_waits']:.0f} (server-wide)",
        )


METHOD = [
    "- **batches**: N no-op jobs (10,000) drained by a pool of W=4, plain (enqueue_many) and"
    " in one `q.batch(on_complete=...)`, taking turns over five rounds; each timed from the"
    " first enqueue to the last job gone and the batch settled (its callback enqueued). The"
    " figure is the ratio of the median times, batch / plain; on MariaDB the server's"
    " deadlocks and row lock waits during the batch rounds.",
]
