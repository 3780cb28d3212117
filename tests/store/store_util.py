"""What the store-contract tests share (test_store.py, test_store_ops.py): lease owners,
a job built as `Queue.enqueue` builds it, put one, claim one, read a job's status.
"""

from __future__ import annotations

from datetime import datetime

from supervisor.building import build_job
from supervisor.models import NewJob
from supervisor.store import Store

A = "host-a:101:aaaa"  # lease owners, as workers name themselves
B = "host-b:202:bbbb"
LEASE = 60.0


def job(
    queue: str = "work",
    *,
    handler: str = "test.job",
    payload: object = None,
    delay: float = 0.0,
    run_at: datetime | None = None,
    priority: int = 0,
    unique_key: str | None = None,
    max_attempts: int | None = None,
) -> NewJob:
    return build_job(handler, payload, queue, delay, run_at, priority, unique_key, max_attempts)


def put(store: Store, queue: str = "work", **options: object) -> int:
    return store.enqueue(job(queue, **options))  # type: ignore[arg-type]


def claim_one(store: Store, owner: str = A, queue: str = "work", lease: float = LEASE) -> int:
    [row] = store.claim(queue, owner, 1, lease)
    return row.id


def status(store: Store, job_id: int) -> str | None:
    row = store.get_job(job_id)
    return None if row is None else str(row.status)
