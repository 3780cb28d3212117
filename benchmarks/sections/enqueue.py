"""Section enqueue: `Queue.enqueue` (one commit each) against a raw driver INSERT loop on
the same table, rounds alternating, and `Queue.enqueue_many` in batches of 1,000."""

from __future__ import annotations

import statistics
import time

from harness import Bench, Deadline

from supervisor import Queue


def run(bench: Bench, deadline: Deadline) -> None:
    """Single enqueues and the raw INSERT loop alternate in short rounds, each going
    first in every other round, so drift and a stray fsync stall hit both; the ratio
    is the median of the rounds' ratios (one stall in one round does not decide it)."""
    s = bench.s
    bench.b.reset()
    q = Queue(bench.b.admin_url)
    try:
        q.enqueue("bench.noop", {"warm": True})  # connect outside the clock
        rounds = 20
        per_round = s.enqueue_single // rounds
        single_s = raw_s = 0.0
        ratios = []
        for r in range(rounds):
            raw_first = r % 2 == 1
            raw_round = bench.b.raw_insert_loop(per_round) if raw_first else 0.0
            started = time.perf_counter()
            for i in range(per_round):
                q.enqueue("bench.noop", {"i": r * per_round + i})
            single_round = time.perf_counter() - started
            if not raw_first:
                raw_round = bench.b.raw_insert_loop(per_round)
            single_s += single_round
            raw_s += raw_round
            ratios.append(raw_round / single_round)
            deadline.check("enqueuing one by one")
        single = rounds * per_round / single_s
        raw = rounds * per_round / raw_s
        bench.fig(
            "enqueue",
            f"Queue.enqueue, 1 commit each (n={s.enqueue_single:,})",
            single,
            "jobs/s",
        )
        bench.fig("enqueue", "raw driver INSERT loop, autocommit (baseline)", raw, "jobs/s")
        bench.fig(
            "enqueue",
            f"enqueue / raw INSERT, median of {rounds} alternating rounds",
            statistics.median(ratios),
            "x",
            target=(">=", 0.9),
        )
        bench.b.reset()
        specs = [{"handler": "bench.noop", "payload": {"i": i}} for i in range(s.many_batch)]
        started = time.perf_counter()
        for _ in range(s.enqueue_many // s.many_batch):
            q.enqueue_many(specs)
            deadline.check("enqueue_many")
        many = s.enqueue_many / (time.perf_counter() - started)
        bench.fig(
            "enqueue",
            f"Queue.enqueue_many, batches of {s.many_batch:,} (n={s.enqueue_many:,})",
            many,
            "jobs/s",
            target=(">=", 20_000.0),
        )
    finally:
        q.close()
        bench.b.reset()


METHOD = [
    "- **enqueue**: `Queue.enqueue` in a loop, each call its own commit (fsync on both backends:"
    " innodb_flush_log_at_trx_commit=1, SQLite synchronous=FULL); the baseline is a driver loop of"
    " `INSERT INTO forkq_jobs (queue, handler, payload) VALUES (...)` in autocommit on the same table"
    " (SQLite: forkq's pragmas). `enqueue_many` gets lists of 1,000 dicts.",
]
