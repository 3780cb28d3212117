"""A child's recycler (daemon/child.py) after each job: its job count and lifetime every
time, its RSS (a system call) at most every RSS_EVERY while held jobs wait, so a run of
quick jobs pays one read, and after a batch's last job and at every wake-up as before;
`tests/daemon/test_daemon_children.py` sees a real child over its limit retire."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from supervisor.config import PoolConfig
from supervisor.daemon.child import RSS_EVERY, Recycler
from supervisor.kinds import RetireReason
from supervisor.work.worker import WorkerStats


class CountedReads:
    def __init__(self, rss: Any) -> None:
        self.rss, self.reads = rss, 0

    def __call__(self) -> int:
        self.reads += 1
        return int(self.rss())


def _recycler(**pool: Any) -> tuple[Recycler, CountedReads, Any]:
    worker: Any = SimpleNamespace(stats=WorkerStats(), held=[])
    recycler = Recycler(PoolConfig(name="q", **pool), worker)
    counted = CountedReads(recycler.rss)
    recycler.rss = counted  # type: ignore[assignment]
    return recycler, counted, worker


def test_a_run_of_quick_jobs_reads_the_rss_once_per_interval() -> None:
    recycler, counted, worker = _recycler(max_jobs_per_child=1_000_000)
    worker.held = ["the rest of the batch"]
    started = time.monotonic()
    for _ in range(2000):
        worker.stats.jobs += 1
        assert recycler() is None
    elapsed = time.monotonic() - started
    assert 1 <= counted.reads <= 2 + elapsed / RSS_EVERY  # the first job's, then by time
    recycler.rss_read_at -= RSS_EVERY  # as if the last read were RSS_EVERY ago
    reads = counted.reads
    recycler()  # a job that ended RSS_EVERY after the last read: read again
    assert counted.reads == reads + 1


def test_the_first_job_over_the_memory_limit_retires_the_child() -> None:
    recycler, counted, _ = _recycler(memory_limit_mb=1)  # any Python process is over 1 MB
    assert recycler() == RetireReason.MEMORY.said(1)
    assert counted.reads == 1


def test_job_count_and_lifetime_are_looked_at_after_every_job() -> None:
    recycler, _, worker = _recycler(max_jobs_per_child=1)
    recycler.retire_at = time.monotonic() + 3600
    worker.stats.jobs = 1
    assert recycler() == RetireReason.MAX_JOBS.said(1)
    worker.stats.jobs = 0
    recycler.max_jobs, recycler.retire_at = 10, time.monotonic() - 1
    assert recycler() == RetireReason.MAX_LIFETIME.said()


def test_the_last_job_of_a_batch_and_an_idle_wake_up_read_it_at_once() -> None:
    """A quick job that grew the child, then nothing held: it retires now, not at its next
    wake-up (which may be IDLE_RECHECK away)."""
    recycler, counted, _ = _recycler(max_jobs_per_child=1_000_000)
    for _ in range(3):
        assert recycler() is None
    assert counted.reads == 3  # nothing held: every call reads
    recycler.memory_limit = 1  # the job that just ended grew past the limit
    assert recycler() == RetireReason.MEMORY.said(recycler.pool.memory_limit_mb)
