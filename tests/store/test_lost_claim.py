"""A claim whose COMMIT went through while its answer was lost (the server, or the Galera
node the worker wrote through, died in between: issue 24). The jobs it took are the
worker's in the table and unknown to it: after the reconnect it returns them to ready,
uncounted, instead of leaving them to wait out their lease (a job's timeout + 30 s).

The loss is injected as the driver reports it (2013, translated by the store's own
error handling) right after the real claim committed, on the shared MariaDB."""

from __future__ import annotations

import sys
from typing import Any

from supervisor import Queue, registry
from supervisor.config import Config, PoolConfig
from supervisor.dburl import parse_database_url
from supervisor.kinds import OnSuccess
from supervisor.store import open_store
from supervisor.store.mysql import MySQLStore
from supervisor.work.worker import Worker

DRIVER_ERRORS = sys.modules["pymysql.err"]
QUEUE = "lostclaim"


def test_the_jobs_of_a_claim_whose_answer_was_lost_run_without_waiting_for_the_lease(
    mysql_db_url: str,
) -> None:
    ran: list[int] = []
    registry.handler("t.lost_claim_noop", queue=QUEUE)(lambda payload, job: ran.append(job.id))
    store = open_store(mysql_db_url)
    assert isinstance(store, MySQLStore)
    ids = Queue(store=store, wake=False).enqueue_many(
        [{"handler": "t.lost_claim_noop", "queue": QUEUE}] * 3
    )
    real_claim = store.complete_and_claim
    lose = {"answers": 1}

    def claim_then_lose_the_answer(*args: Any, **kwargs: Any) -> Any:
        result = real_claim(*args, **kwargs)  # committed
        if lose["answers"]:
            lose["answers"] -= 1
            with store._errors():
                raise DRIVER_ERRORS.OperationalError(2013, "Lost connection to server during query")
        return result

    store.complete_and_claim = claim_then_lose_the_answer  # type: ignore[method-assign]
    pool = PoolConfig(name=QUEUE, on_success=OnSuccess.KEEP)  # rows kept: attempts read after
    config = Config(database=parse_database_url(mysql_db_url), pools=(pool,))
    worker = Worker(store, config, [QUEUE], "test:1:lost-claim")
    worker.sleep = lambda seconds: None  # type: ignore[method-assign]  # back-off without waiting
    try:
        assert worker.safely(worker.work_once) == 0  # the claim's answer is lost
        assert ran == [] and len(store.held_by(worker.owner)) == 1  # ours, unknown to us
        while worker.safely(worker.work_once):
            pass
        worker.flush()
        assert sorted(ran) == ids  # each once, none left to its lease
        jobs = [store.get_job(i) for i in ids]
        assert [(j.status, j.attempts) for j in jobs if j] == [("done", 1)] * 3  # uncounted
    finally:
        store.close()


class _Lines:
    """The worker's log, as (level, event) pairs."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.lines.append((level, event))


def test_contention_backs_off_for_a_claims_time_and_a_lost_connection_longer(
    mysql_db_url: str,
) -> None:
    """A claim that deadlocked on every retry (two daemons' claims on [limits] buckets)
    backed off 0.25 s, as a lost connection does, and its end was logged `db_reconnected`:
    most workers sat idle for the back-off while jobs were ready. Contention's first
    back-off is 20 ms now, and only a lost connection's end says reconnected."""
    registry.handler("t.contention_noop", queue=QUEUE)(lambda payload, job: None)
    store = open_store(mysql_db_url)
    assert isinstance(store, MySQLStore)
    jobs = [{"handler": "t.contention_noop", "queue": QUEUE}] * 2
    Queue(store=store, wake=False).enqueue_many(jobs)
    real_claim = store.complete_and_claim
    deadlock, lost = (1213, "Deadlock found when trying to get lock"), (2013, "Lost connection")
    answers: list[tuple[int, str] | None] = [deadlock, None, lost, None]  # None: the real claim

    def failing_claim(*args: Any, **kwargs: Any) -> Any:
        answer = answers.pop(0)
        if answer is not None:
            with store._errors():
                raise DRIVER_ERRORS.OperationalError(*answer)
        return real_claim(*args, **kwargs)

    store.complete_and_claim = failing_claim  # type: ignore[method-assign]
    pool = PoolConfig(name=QUEUE, claim_batch=1)
    config = Config(database=parse_database_url(mysql_db_url), pools=(pool,))
    worker = Worker(store, config, [QUEUE], "test:1:contention")
    naps: list[float] = []
    worker.sleep = naps.append  # type: ignore[method-assign]
    worker.log = log = _Lines()
    try:
        steps = [worker.safely(worker.work_once) for _ in range(4)]
        assert steps == [0, 1, 0, 1], (steps, log.lines)
        assert len(naps) == 2 and 0.015 <= naps[0] <= 0.025, naps  # contention: 20 ms
        assert 0.2 <= naps[1] <= 0.3, naps  # a lost connection: 0.25 s
        assert [event for _, event in log.lines if event.startswith("db_")] == [
            "db_contention",  # over at the next claim, without a word
            "db_unreachable",
            "db_reconnected",
        ], log.lines
    finally:
        store.close()
