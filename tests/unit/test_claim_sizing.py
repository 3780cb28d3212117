"""How many quick jobs a worker claims after a batch that held one slow job (work/worker.py
claim_size): the batch's typical job decides, not its mean, so one slow job among quick
ones (whatever waits behind it goes back to the queue by the master's hand-back) does not
shrink the next claims to one job, each a commit (issue 20's heavy tail)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from supervisor import registry
from supervisor.config import Config, PoolConfig
from supervisor.dburl import parse_database_url
from supervisor.queue import Queue
from supervisor.store import open_store
from supervisor.work.events import NoEvents
from supervisor.work.worker import Worker

QUEUE = "sizing"


class HandsBack(NoEvents):
    """A worker whose unstarted jobs someone takes back (as a daemon child's master does)."""

    can_hand_back = True

    def __init__(self) -> None:
        self.claims: list[int] = []

    def claimed(self, ids: list[int]) -> None:
        if ids:
            self.claims.append(len(ids))


def quick(payload: Any, job: Any) -> None:
    pass


def slow(payload: Any, job: Any) -> None:
    time.sleep(0.3)


@pytest.fixture
def worker(sqlite_db_url: str) -> Iterator[Worker]:
    registry.handler("t.sizing.quick", queue=QUEUE)(quick)
    registry.handler("t.sizing.slow", queue=QUEUE)(slow)
    store = open_store(sqlite_db_url)
    config = Config(
        database=parse_database_url(sqlite_db_url),
        pools=(PoolConfig(name=QUEUE, timeout=30, claim_batch=20),),
    )
    yield Worker(store, config, [QUEUE], "host:1:sizing", HandsBack())
    store.close()
    for name in ("t.sizing.quick", "t.sizing.slow"):
        registry._HANDLERS.pop(name, None)  # the registry is process-wide


def test_one_slow_job_among_quick_ones_does_not_shrink_the_next_claim(
    worker: Worker, sqlite_db_url: str
) -> None:
    worker.store.apply_schema()
    q = Queue(sqlite_db_url)
    jobs = [{"handler": "t.sizing.quick", "payload": {}, "queue": QUEUE}] * 60
    jobs[8] = {"handler": "t.sizing.slow", "payload": {}, "queue": QUEUE}  # in the 4th claim
    q.enqueue_many(jobs)
    q.close()
    while worker.work_once():
        pass
    claims = worker.events.claims  # type: ignore[attr-defined]
    assert claims[:4] == [1, 2, 4, 8]  # slow start; the 4th batch holds the slow job
    assert claims[4] == 16, claims  # and the next one still doubles
    assert sum(claims) == 60
