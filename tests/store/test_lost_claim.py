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
