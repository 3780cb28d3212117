"""The master's hand-back, as the store writes it (both backends): the successes a busy
child had not acknowledged are written, the jobs it claimed and never started go back to
ready with no attempt counted, and the running job's start is recorded once."""

from __future__ import annotations

from datetime import UTC, datetime

from store_util import LEASE, A, B, job

from supervisor.models import HandBack, JobState
from supervisor.store import Store


def test_hand_back_writes_successes_returns_unstarted_and_marks_the_start(store: Store) -> None:
    ids = store.insert_many([job() for _ in range(5)])
    claimed = [row.id for row in store.claim("work", A, 5, LEASE)]
    assert claimed == ids
    done, running, *unstarted = ids
    taken = HandBack(
        successes=[done], on_success="keep", unstarted=unstarted, running=running, running_for=2.0
    )
    before = datetime.now(UTC)
    assert store.hand_back(A, taken) == 3

    finished = store.get_job(done)
    assert finished is not None and finished.status is JobState.DONE
    assert finished.started_at is not None  # recorded with its ack: it ran behind the first
    for job_id in unstarted:
        row = store.get_job(job_id)
        assert row is not None
        assert (row.status, row.attempts, row.locked_by) == (JobState.READY, 0, None)
    row = store.get_job(running)
    assert row is not None and row.started_at is not None and row.shown_status == "running"
    ago = (before - row.started_at).total_seconds()
    assert 1.0 < ago < 30.0, ago  # about 2 s before the hand-back, not the claim's instant
    # The returned jobs are claimable at once, in their order.
    assert [r.id for r in store.claim("work", B, 5, LEASE)] == unstarted


def test_hand_back_never_touches_jobs_another_owner_holds_now(store: Store) -> None:
    ids = store.insert_many([job() for _ in range(2)])
    store.claim("work", A, 2, LEASE)
    store.release(A, ids)  # A gave them back itself meanwhile; B takes them
    assert [r.id for r in store.claim("work", B, 2, LEASE)] == ids
    taken = HandBack(successes=[], on_success="delete", unstarted=ids, running=None, running_for=0)
    assert store.hand_back(A, taken) == 0
    for job_id in ids:
        row = store.get_job(job_id)
        assert row is not None and (row.status, row.locked_by) == (JobState.RUNNING, B)
