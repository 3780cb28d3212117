"""Cancelling, the store's side (SPEC: Job lifecycle), on both backends: a waiting job ends
`cancelled` at once and is never run; a running one becomes `cancelling` for the master that
runs it; finished jobs are named, never changed. The daemon's side (killing the child) is
tested with the daemon."""

from __future__ import annotations

from util import count_rows

from supervisor import Queue
from supervisor.building import build_job
from supervisor.models import CancelResult, JobState
from supervisor.store import Store

OWNER = "host-a:101:aaaa"
LEASE = 60.0


def put(store: Store, queue: str = "work", delay: float = 0.0) -> int:
    return store.enqueue(build_job("test.job", {"n": 1}, queue, delay, None, 0, None, None))


def running(store: Store, queue: str = "busy") -> int:
    job_id = put(store, queue)
    [row] = store.claim(queue, OWNER, 1, LEASE)
    assert row.id == job_id
    return job_id


def dead(store: Store) -> int:
    job_id = running(store, "doomed")
    assert store.fail(OWNER, job_id, "boom", dead=True)
    return job_id


def test_each_job_gets_what_its_status_allows(store: Store) -> None:
    ready, scheduled = put(store), put(store, delay=3600)
    held, gone = running(store), dead(store)
    kept = running(store, "kept")
    assert store.complete(OWNER, [kept], "keep") == 1
    results = store.cancel_jobs([ready, scheduled, held, gone, kept, 987654], by="ops@box")
    assert results == {
        ready: CancelResult.CANCELLED,
        scheduled: CancelResult.CANCELLED,
        held: CancelResult.CANCELLING,
        gone: CancelResult.DEAD,
        kept: CancelResult.DONE,
        987654: CancelResult.NOT_FOUND,
    }
    assert [r.ok for r in results.values()] == [True, True, True, False, False, False]


def test_a_cancelled_job_keeps_its_row_says_who_and_is_never_claimed(store: Store) -> None:
    job_id = put(store)
    store.cancel_jobs([job_id], by="ops@box (forkq cancel)")
    row = store.get_job(job_id)
    assert row is not None and row.status == JobState.CANCELLED
    assert row.last_error == "cancelled by ops@box (forkq cancel)"
    assert row.finished_at is not None and row.locked_by is None
    assert store.claim("work", OWNER, 10, LEASE) == []
    assert store.cancel_jobs([job_id], by="again") == {job_id: CancelResult.ALREADY_CANCELLED}


def test_a_running_job_stays_with_its_holder_as_cancelling(store: Store) -> None:
    job_id = running(store)
    assert store.cancel_jobs([job_id], by="the dashboard") == {job_id: CancelResult.CANCELLING}
    row = store.get_job(job_id)
    assert row is not None and row.status == JobState.CANCELLING
    assert row.locked_by == OWNER  # its master finds it by the lease holder
    assert row.last_error == "cancelled by the dashboard"
    assert store.retry_jobs([job_id]) == 0  # still running somewhere: not made ready
    assert store.cancel_jobs([job_id], by="twice") == {job_id: CancelResult.CANCELLING}


def test_an_archived_job_is_done_not_unknown(store: Store) -> None:
    job_id = running(store, "archived")
    assert store.complete(OWNER, [job_id], "archive") == 1
    assert store.cancel_jobs([job_id], by="x") == {job_id: CancelResult.DONE}


def test_a_cancelled_job_can_be_retried(store: Store) -> None:
    job_id = put(store)
    store.cancel_jobs([job_id], by="x")
    assert store.retry_jobs([job_id]) == 1
    assert store.claim("work", OWNER, 1, LEASE)[0].id == job_id


def test_queue_cancel_is_true_for_waiting_and_running_jobs_only(
    db_url: str, queue: Queue, store: Store
) -> None:
    waiting = queue.enqueue("test.job", {}, queue="work")
    held = running(store)
    assert queue.cancel(waiting) and queue.cancel(held)
    assert not queue.cancel(waiting)  # already cancelled
    assert not queue.cancel(dead(store)) and not queue.cancel(123456789)
    assert "Queue.cancel on " in (store.get_job(waiting).last_error or "")  # type: ignore[union-attr]
    assert count_rows(db_url, "forkq_jobs", "status = 'cancelled'") == 1


def test_finishing_a_cancel_keeps_the_started_attempt_in_its_history(store: Store) -> None:
    """The attempt a cancel ended goes into forkq_attempts as `cancelled` (README: Every
    attempt), once; a job claimed but never started ran no attempt and gets none."""
    started, unstarted = put(store, "busy"), put(store, "busy")
    assert [r.id for r in store.claim("busy", OWNER, 2, LEASE)] == [started, unstarted]
    rows = [store.get_job(i) for i in (started, unstarted)]  # the first starts at its claim
    assert [r.started_at is not None for r in rows if r] == [True, False]
    assert store.cancel_jobs([started, unstarted], by="tester") == {
        started: CancelResult.CANCELLING,
        unstarted: CancelResult.CANCELLING,
    }
    assert store.finish_cancel(started) and store.finish_cancel(unstarted)
    [attempt] = store.job_attempts(started)
    assert (attempt["attempt"], attempt["outcome"]) == (1, "cancelled")
    assert (attempt["host"], attempt["pid"]) == ("host-a", 101)
    row = store.get_job(started)
    assert row is not None and row.status == JobState.CANCELLED
    assert attempt["error"] == row.last_error and "tester" in attempt["error"]
    assert attempt["started_at"] is not None and attempt["ended_at"] is not None
    assert store.job_attempts(unstarted) == []
    assert store.finish_cancel(started) is False  # once: no second line
    assert len(store.job_attempts(started)) == 1
