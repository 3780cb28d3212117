"""Jobs held under a rate (work/holds.py): a claim of a bucket with a rate takes quick jobs
in a batch, like any, and each starts within `rate_hold` of the claim (half a tenth of the
period) or goes back to ready unstarted, no attempt counted, for the next claim. A worker
whose unstarted jobs someone takes back (as a daemon child's master does), both backends."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from supervisor import Queue, registry
from supervisor.config import Config, LimitConfig, PoolConfig, Rate
from supervisor.dburl import parse_database_url
from supervisor.models import JobRow, JobState
from supervisor.store import Store
from supervisor.store.jobs import claimed_job
from supervisor.store.limits.buckets import LimitPlan
from supervisor.work.events import NoEvents
from supervisor.work.holds import RateHolds
from supervisor.work.worker import Worker

QUEUE = "holds"
ran: list[tuple[int, float]] = []  # (job id, monotonic start), in this process


class HandsBack(NoEvents):
    """Someone takes back what the worker holds: claims may hold jobs behind the first."""

    can_hand_back = True

    def __init__(self) -> None:
        self.claims: list[int] = []
        self.unheld: list[int] = []

    def claimed(self, ids: list[int]) -> None:
        if ids:
            self.claims.append(len(ids))

    def unhold(self, ids: list[int]) -> list[int]:
        self.unheld += ids
        return ids


def record(payload: Any, job: Any) -> None:
    ran.append((job.id, time.monotonic()))
    time.sleep(payload.get("seconds", 0))


@pytest.fixture(autouse=True)
def handler() -> Iterator[None]:
    registry.handler("t.holds.record", queue=QUEUE)(record)
    ran.clear()
    yield
    registry._HANDLERS.pop("t.holds.record", None)  # the registry is process-wide


def worker_under(store: Store, db_url: str, rate: Rate) -> Worker:
    config = Config(
        database=parse_database_url(db_url),
        pools=(PoolConfig(name=QUEUE, timeout=30, claim_batch=20),),
        limits=(LimitConfig("api", queues=(QUEUE,), rate=rate),),
    )
    worker = Worker(store, config, [QUEUE], "host:1:holds", HandsBack())
    worker.sizing.batch = 8  # as after a few batches of quick jobs (slow start, sizing.py)
    return worker


def enqueue(store: Store, seconds: list[float]) -> list[int]:
    q = Queue(store=store)
    return q.enqueue_many(
        [{"handler": "t.holds.record", "payload": {"seconds": s}, "queue": QUEUE} for s in seconds]
    )


def test_quick_jobs_under_a_rate_are_claimed_in_a_batch(store: Store, db_url: str) -> None:
    worker = worker_under(store, db_url, Rate(1000, 60.0))
    ids = enqueue(store, [0.0] * 4)
    assert worker.work_once() == 4  # one claim for all four: the bucket keeps room
    worker.flush()
    assert [job for job, _ in ran] == ids
    assert worker.events.claims == [4]  # type: ignore[attr-defined]


def test_a_held_job_that_could_start_no_more_goes_back_unstarted(store: Store, db_url: str) -> None:
    """Rate 1000/1s: a job may start 0.05 s after its claim at the latest. Behind a job
    of 0.3 s, the three others go back to ready, no attempt counted, and the next claim
    runs them; under 1000/1m (3 s) they wait and run in the same batch."""
    worker = worker_under(store, db_url, Rate(1000, 1.0))
    slow, *quick = enqueue(store, [0.3, 0.0, 0.0, 0.0])
    assert worker.work_once() == 4
    assert [job for job, _ in ran] == [slow]
    assert worker.events.unheld == quick  # type: ignore[attr-defined]
    assert {(j.status, j.attempts) for j in map(store.get_job, quick) if j} == {(JobState.READY, 0)}
    while worker.work_once():
        pass
    worker.flush()
    assert sorted(job for job, _ in ran) == [slow, *quick]  # each once
    assert all(store.get_job(i) is None for i in [slow, *quick])  # done (deleted)

    ran.clear()
    patient = worker_under(store, db_url, Rate(1000, 60.0))
    slow, *quick = enqueue(store, [0.3, 0.0, 0.0, 0.0])
    assert patient.work_once() == 4
    assert [job for job, _ in ran] == [slow, *quick]  # all four in the one batch
    assert patient.events.unheld == []  # type: ignore[attr-defined]


def claimed(job_id: int, handler: str) -> JobRow:
    """A job as a claim of QUEUE hands it to the worker."""
    row = {"id": job_id, "handler": handler, "payload": "{}", "priority": 0, "run_at_s": 0.0,
           "attempts": 0, "max_attempts": None, "unique_key": None, "enqueued_at_s": 0.0}  # fmt: skip
    return claimed_job(row, QUEUE, "host:1:holds")


def test_holds_are_timed_from_when_the_claim_had_its_buckets_rows() -> None:
    """Pure: the start-by of a held job under a rate is the instant its claim locked the
    bucket's row (LimitPlan.counted_at, before the claim's commit) plus half a slice; a
    job no rate covers is never late."""
    plan = LimitPlan(
        [LimitConfig("api", handlers=("m.rated",), rate=Rate(1000, 1.0))], {"m.rated": QUEUE}
    )
    rated = [claimed(i, "m.rated") for i in (1, 2)]
    free = claimed(3, "m.free")
    holds = RateHolds(plan)
    plan.counted_at = 100.0
    holds.claimed([*rated, free])
    assert holds.start_by == pytest.approx(100.05)
    assert holds.late([*rated, free], 100.04) == []
    assert [row.id for row in holds.late([rated[1], free], 100.06)] == [2]
    assert holds.start_by is None  # nothing left to watch
    assert RateHolds(LimitPlan([LimitConfig("c", queues=(QUEUE,), concurrency=5)], {})).plan is None


def test_a_fair_pool_under_a_rate_times_each_claim_from_its_own_lock(
    store: Store, db_url: str
) -> None:
    """A fair pool's claims go another way (limits/fair.py); each batch's hold is still
    timed from its own claim, so batches claimed well after the first one run too."""
    config = Config(
        database=parse_database_url(db_url),
        pools=(PoolConfig(name=QUEUE, timeout=30, claim_batch=20, fair=True),),
        limits=(LimitConfig("api", queues=(QUEUE,), rate=Rate(1000, 1.0)),),
    )
    worker = Worker(store, config, [QUEUE], "host:1:holds", HandsBack())
    q = Queue(store=store)
    for round_ in range(3):
        ids = q.enqueue_many(
            [
                {"handler": "t.holds.record", "payload": {}, "queue": QUEUE, "group_key": k}
                for k in ("a", "b", "c")
            ]
        )
        worker.sizing.batch = 8
        while worker.work_once():
            pass
        worker.flush()
        assert sorted(job for job, _ in ran[-3:]) == ids, round_
        time.sleep(0.1)  # twice the hold: a hold timed from an older claim would be over
    assert worker.events.unheld == []  # type: ignore[attr-defined]
