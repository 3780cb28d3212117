"""Batches (q.batch()) through the store's own paths on both backends: no callback before
the with-block ends, callbacks by outcome, the caller's transaction, the chore that
settles a batch whose last job ended through a path without the hook."""

from __future__ import annotations

import json

import pytest
from util import native_connection

from supervisor import Queue
from supervisor.errors import UsageError
from supervisor.store import Store

OWNER = "host:1:batch-test"


def run(store: Store, queue: str = "default", *, dead: frozenset[int] = frozenset()) -> list[int]:
    """Claim what is ready and end it as a worker does (dead for ids in `dead`)."""
    jobs = store.claim(queue, OWNER, 100, 60)
    for job in jobs:
        if job.batch_id is not None:
            store.note_batch_job(job.id, job.batch_id)
    for job in jobs:
        if job.id in dead:
            store.fail(OWNER, job.id, "boom", dead=True)
    store.complete(OWNER, [j.id for j in jobs if j.id not in dead], "delete")
    return [j.id for j in jobs]


def callbacks(store: Store) -> dict[str, dict[str, object]]:
    """{event: payload} of the callback jobs waiting in the table."""
    found = {}
    for row in store.list_jobs():
        if row.handler.startswith("cb."):
            body = json.loads(row.payload)
            found[body["event"]] = body
    return found


def test_a_batch_settles_once_with_complete_and_success_when_all_ended_done(
    queue: Queue, store: Store
) -> None:
    with queue.batch(on_success="cb.ok", on_complete="cb.all", on_dead="cb.dead",
                     payload={"report": 7}) as batch:  # fmt: skip
        ids = [batch.enqueue("t.job", {"n": n}) for n in range(3)]
        ids += batch.enqueue_many([{"handler": "t.job"}, {"handler": "t.job"}])
        assert run(store) == ids  # all end while the block still runs: nothing fires yet
        assert queue.batch_status(batch.id or 0).settled_at is None  # type: ignore[union-attr]
    assert batch.id is not None
    status = queue.batch_status(batch.id)
    assert status is not None and status.settled_at is not None
    assert (status.total, status.pending, status.done, status.dead) == (5, 0, 5, 0)
    found = callbacks(store)
    assert set(found) == {"success", "complete"}
    assert found["complete"]["payload"] == {"report": 7}
    assert (found["complete"]["batch_id"], found["complete"]["done"]) == (batch.id, 5)
    assert set(status.fired) == {"success", "complete"}
    assert store.settle_open_batches() == 0  # settled: the chore finds nothing more


def test_a_dead_job_fires_on_dead_and_complete_not_success(queue: Queue, store: Store) -> None:
    with queue.batch(on_success="cb.ok", on_complete="cb.all", on_dead="cb.dead") as batch:
        first = batch.enqueue("t.job")
        batch.enqueue("t.job")
    assert queue.batch_status(batch.id or 0).pending == 2  # type: ignore[union-attr]
    run(store, dead=frozenset({first}))
    found = callbacks(store)
    assert set(found) == {"complete", "dead"}
    assert (found["dead"]["done"], found["dead"]["dead"]) == (1, 1)


def test_an_empty_batch_settles_when_its_block_ends(queue: Queue, store: Store) -> None:
    with queue.batch(on_complete="cb.all") as batch:
        pass
    assert set(callbacks(store)) == {"complete"}
    assert queue.batch_status(batch.id or 0).total == 0  # type: ignore[union-attr]


def test_a_cancelled_last_job_is_settled_by_the_chore_exactly_once(
    queue: Queue, store: Store
) -> None:
    with queue.batch(on_success="cb.ok", on_complete="cb.all") as batch:
        batch.enqueue("t.job")
        waiting = batch.enqueue("t.job", delay=3600)
    run(store)
    assert callbacks(store) == {}
    assert queue.cancel(waiting)  # a cancel ends it without the finishing hook
    assert store.settle_open_batches() == 1
    assert store.settle_open_batches() == 0
    found = callbacks(store)
    assert set(found) == {"complete"} and found["complete"]["cancelled"] == 1


@pytest.mark.parametrize("outcome", ["rollback", "commit"])
def test_a_batch_in_the_callers_transaction_exists_only_if_it_commits(
    db_url: str, queue: Queue, store: Store, outcome: str
) -> None:
    conn = native_connection(db_url)
    try:
        with queue.batch(on_complete="cb.all", connection=conn) as batch:
            job_id = batch.enqueue("t.job")
        assert store.get_job(job_id) is None  # not committed yet
        getattr(conn, outcome)()
    finally:
        conn.close()
    assert batch.id is not None
    if outcome == "rollback":
        assert queue.batch_status(batch.id) is None and store.get_job(job_id) is None
        return
    job = store.get_job(job_id)
    assert job is not None and job.batch_id == batch.id
    run(store)
    assert set(callbacks(store)) == {"complete"}


def test_a_batch_refuses_unique_keys_and_needs_a_callback(queue: Queue) -> None:
    with pytest.raises(UsageError, match="callback"):
        queue.batch()
    with queue.batch(on_complete="cb.all") as batch, pytest.raises(UsageError, match="unique"):
        batch.enqueue("t.job", unique_key="k")


def test_a_sealed_batch_takes_no_more_jobs_and_a_batch_is_entered_once(
    queue: Queue, store: Store
) -> None:
    """A job added after the with-block joined a batch whose total and callbacks were
    told: done past its total, or a dead job under a batch that had fired on_success.
    Entering the same batch twice opened a second one, left open (its callbacks lost)."""
    with queue.batch(on_complete="cb.all") as batch:
        batch.enqueue("t.job")
    with pytest.raises(UsageError, match=f"batch {batch.id} is sealed: its with-block ended"):
        batch.enqueue("t.job")
    with pytest.raises(UsageError, match="takes no more jobs"):
        batch.enqueue_many([{"handler": "t.job"}])
    with pytest.raises(UsageError, match=r"inside `with q.batch\(...\) as b:` only"):
        queue.batch(on_complete="cb.all").enqueue("t.job")  # never entered
    assert batch.id is not None
    status = queue.batch_status(batch.id)
    assert status is not None and status.total == 1
    run(store)
    assert callbacks(store)["complete"]["total"] == 1
    assert [row.handler for row in store.list_jobs()] == ["cb.all"]  # none refused was written

    nested = queue.batch(on_complete="cb.all")
    with nested, pytest.raises(UsageError, match="a batch is entered once"), nested:
        nested.enqueue("t.job")
    with pytest.raises(UsageError, match="a batch is entered once"), batch:
        pass


def test_a_job_of_a_batch_cannot_wait_on_parents_and_is_told_why(
    queue: Queue, store: Store
) -> None:
    parent = queue.enqueue("t.job")
    for enqueue in (
        lambda b: b.enqueue("t.job", depends_on=[parent]),
        lambda b: b.enqueue_many(
            [{"handler": "t.job"}, {"handler": "t.job", "depends_on": [parent]}]
        ),
    ):
        refused = pytest.raises(UsageError, match="a job of a batch cannot have depends_on")
        with queue.batch(on_complete="cb.all") as batch, refused:
            enqueue(batch)
        assert batch.total == 0  # nothing of it was written
