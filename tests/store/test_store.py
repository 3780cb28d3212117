"""The store contract, run against a real SQLite file and a real MariaDB (`db_url`):
claiming, leases, completion, failure and release. Operator commands, processes, locks,
schedules, alert state and errors: test_store_ops.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from store_util import LEASE, A, B, claim_one, job, put, status
from util import count_rows, sql, wait_until

from supervisor.models import JobState
from supervisor.outcomes import SnoozeWritten
from supervisor.store import Store

# --- claiming -----------------------------------------------------------------------------------


def test_claim_order_is_priority_then_run_at_then_id(store: Store) -> None:
    base = datetime.now(UTC) - timedelta(minutes=5)
    later = put(store, run_at=base + timedelta(seconds=20))
    earlier = put(store, run_at=base + timedelta(seconds=10))
    urgent = put(store, run_at=base + timedelta(seconds=30), priority=5)
    first_of_twins = put(store, run_at=base)
    second_of_twins = put(store, run_at=base)
    unimportant = put(store, run_at=base - timedelta(minutes=1), priority=-1)

    order = [claim_one(store) for _ in range(6)]

    assert order == [urgent, first_of_twins, second_of_twins, earlier, later, unimportant]
    assert store.claim("work", A, 1, LEASE) == []


def test_jobs_enqueued_together_are_claimed_fifo_by_id(store: Store) -> None:
    # One transaction gives every row the same run_at: the id alone breaks the tie.
    ids = store.insert_many([job(payload={"n": n}) for n in range(5)])
    claimed = store.claim("work", A, 10, LEASE)
    assert [row.id for row in claimed] == ids == sorted(ids)


def test_claim_takes_only_from_the_named_queue(store: Store) -> None:
    mail = put(store, "email")
    put(store, "reports")
    claimed = store.claim("email", A, 10, LEASE)
    assert [row.id for row in claimed] == [mail]
    assert [row.queue for row in store.list_jobs(status="ready")] == ["reports"]


def test_batch_claim_takes_at_most_the_requested_number(store: Store) -> None:
    ids = store.insert_many([job() for _ in range(10)])
    batches = [store.claim("work", A, 4, LEASE) for _ in range(4)]
    assert [len(batch) for batch in batches] == [4, 4, 2, 0]
    claimed = [row.id for batch in batches for row in batch]
    assert sorted(claimed) == sorted(ids)
    for row in store.list_jobs(limit=100):
        assert (row.status, row.locked_by, row.attempts) == (JobState.RUNNING, A, 1)
        assert row.locked_until is not None
    # The first job of a batch starts at once; the others are claimed, not running, until
    # they start (their start is recorded by the master's hand-back, or with their ack).
    firsts = {batch[0].id for batch in batches if batch}
    for job_id in claimed:
        stored = store.get_job(job_id)
        assert stored is not None and stored.locked_until is not None
        if job_id in firsts:
            assert stored.started_at is not None and stored.locked_until > stored.started_at
            assert stored.shown_status == "running"
        else:
            assert stored.started_at is None and stored.shown_status == "claimed"
    assert [row.id for row in store.list_jobs(status="running", limit=100)] == sorted(
        firsts, reverse=True
    )


def test_claimed_rows_describe_the_job_as_now_held(store: Store) -> None:
    job_id = put(store, payload={"to": "a@example.com"}, max_attempts=3)
    [row] = store.claim("work", A, 1, LEASE)
    stored = store.get_job(job_id)
    assert stored is not None
    assert (row.id, row.status, row.locked_by, row.attempts) == (job_id, JobState.RUNNING, A, 1)
    assert (stored.status, stored.locked_by, stored.attempts) == (row.status, A, 1)
    assert row.payload == '{"to": "a@example.com"}' and row.max_attempts == 3


def test_a_delayed_job_is_not_claimed_early_but_is_once_due(store: Store) -> None:
    soon = put(store, delay=0.3)
    much_later = put(store, delay=3600)
    assert store.claim("work", A, 10, LEASE) == []

    claimed = wait_until(
        lambda: store.claim("work", A, 10, LEASE), timeout=10, message="delayed job due"
    )

    assert [row.id for row in claimed] == [soon]
    row = store.get_job(soon)
    assert row is not None and row.started_at is not None and row.started_at >= row.run_at
    assert status(store, much_later) == "scheduled"  # outside the claim's range until near


def test_run_at_is_an_absolute_time(store: Store) -> None:
    now = datetime.now(UTC)
    future = put(store, run_at=now + timedelta(hours=1))
    tokyo = timezone(timedelta(hours=9))
    past = put(store, run_at=(now - timedelta(hours=1)).astimezone(tokyo))

    claimed = store.claim("work", A, 10, LEASE)

    assert [row.id for row in claimed] == [past]
    stored = store.get_job(future)
    assert stored is not None
    assert abs(stored.run_at - (now + timedelta(hours=1))) < timedelta(milliseconds=1)
    stored_past = store.get_job(past)
    assert stored_past is not None
    assert abs(stored_past.run_at - (now - timedelta(hours=1))) < timedelta(milliseconds=1)


# --- leases -------------------------------------------------------------------------------------


def test_a_live_lease_keeps_other_owners_out(store: Store) -> None:
    job_id = put(store)
    assert claim_one(store, A) == job_id
    assert store.claim("work", B, 10, LEASE) == []
    assert [row.id for row in store.held_by(A)] == [job_id]
    assert store.held_by(B) == []


def test_extend_leases_pushes_the_expiry_for_the_holder_only(store: Store) -> None:
    job_id = put(store)
    claim_one(store, A, lease=0.5)
    before = store.get_job(job_id)
    assert before is not None and before.locked_until is not None

    assert store.extend_leases(B, [job_id], 3600) == 0
    assert store.extend_leases(A, [job_id], 3600) == 1

    after = store.get_job(job_id)
    assert after is not None and after.locked_until is not None
    assert after.locked_until - before.locked_until > timedelta(minutes=50)
    assert store.expired_leases() == []


def test_an_expired_lease_is_listed_and_can_be_settled_by_the_reaper(store: Store) -> None:
    short = put(store)
    claim_one(store, A, lease=0.2)
    healthy = put(store)
    claim_one(store, B, lease=LEASE)

    expired = wait_until(store.expired_leases, timeout=10, message="lease expiry")

    assert [row.id for row in expired] == [short]
    # The reaper's guarded fail leaves a live lease alone.
    assert store.fail(B, healthy, "lease expired", dead=False, only_expired=True) is False
    assert store.fail(A, short, "lease expired", dead=False, only_expired=True, max_attempts=10)
    row = store.get_job(short)
    assert row is not None
    assert (row.status, row.attempts, row.locked_by) == (JobState.READY, 1, None)
    assert row.last_error == "lease expired"
    assert claim_one(store, B) == short
    assert status(store, healthy) == "running"


# --- completion -------------------------------------------------------------------------------


def test_complete_with_delete_removes_the_job(db_url: str, store: Store) -> None:
    job_id = put(store)
    claim_one(store)
    assert store.complete(A, [job_id], "delete") == 1
    assert store.get_job(job_id) is None
    assert count_rows(db_url, "forkq_jobs_archive") == 0


def test_complete_with_keep_marks_the_job_done(store: Store) -> None:
    job_id = put(store)
    claim_one(store)
    assert store.complete(A, [job_id], "keep") == 1
    row = store.get_job(job_id)
    assert row is not None
    assert (row.status, row.locked_by, row.locked_until) == (JobState.DONE, None, None)
    assert row.finished_at is not None and row.started_at is not None
    assert row.finished_at >= row.started_at
    assert store.claim("work", B, 10, LEASE) == []


def test_a_job_claimed_behind_another_and_ended_dead_has_a_start(store: Store) -> None:
    # Only a batch's first job is marked started by its claim; the others by the master's
    # hand-back or by their end. A dead end recorded no start: the job's page showed a
    # dead job that never started, its attempt without a duration.
    first, second = store.insert_many([job(max_attempts=1), job(max_attempts=1)])
    assert [row.id for row in store.claim("work", A, 2, LEASE)] == [first, second]
    before = store.get_job(second)
    assert before is not None and before.started_at is None
    assert store.fail(A, second, "ValueError: bad payload", dead=True)
    row = store.get_job(second)
    assert row is not None and row.status == JobState.DEAD
    assert row.started_at is not None and row.finished_at is not None
    assert row.started_at <= row.finished_at


def test_complete_with_archive_moves_the_row_to_the_archive_table(
    db_url: str, store: Store
) -> None:
    job_id = put(store, payload={"n": 7}, priority=3)
    claim_one(store)
    assert store.complete(A, [job_id], "archive") == 1
    assert count_rows(db_url, "forkq_jobs", "id = ?", (job_id,)) == 0
    [(archived_status, payload, priority, attempts)] = sql(
        db_url,
        "SELECT status, payload, priority, attempts FROM forkq_jobs_archive WHERE id = ?",
        (job_id,),
    )
    assert (archived_status, payload, priority, attempts) == ("done", '{"n": 7}', 3, 1)
    row = store.get_job(job_id)  # `forkq show` still finds it
    assert row is not None and row.status == JobState.DONE and row.finished_at is not None


@pytest.mark.parametrize("mode", ["delete", "keep", "archive"])
def test_complete_by_another_owner_changes_nothing(db_url: str, store: Store, mode: str) -> None:
    job_id = put(store)
    claim_one(store, A)
    assert store.complete(B, [job_id], mode) == 0
    row = store.get_job(job_id)
    assert row is not None and (row.status, row.locked_by) == (JobState.RUNNING, A)
    assert count_rows(db_url, "forkq_jobs_archive") == 0


def test_complete_of_a_job_no_longer_running_changes_nothing(store: Store) -> None:
    job_id = put(store)
    claim_one(store, A)
    assert store.release(A, [job_id]) == 1
    assert store.complete(A, [job_id], "delete") == 0
    assert status(store, job_id) == "ready"


# --- failure and release ----------------------------------------------------------------------


def test_fail_with_attempts_left_returns_the_job_to_ready_later(store: Store) -> None:
    job_id = put(store)
    claim_one(store)
    before = store.db_now()
    assert store.fail(A, job_id, "ValueError: boom", dead=False, delay=30, max_attempts=5) is True
    row = store.get_job(job_id)
    assert row is not None
    # A backoff past the promotion horizon waits as scheduled, out of the claim's range.
    assert (row.status, row.locked_by, row.locked_until) == (JobState.SCHEDULED, None, None)
    assert row.last_error == "ValueError: boom"
    assert row.attempts == 1 and row.max_attempts == 5
    assert row.run_at.timestamp() >= before + 29
    assert store.claim("work", B, 10, LEASE) == []  # not before its backoff


def test_fail_as_dead_ends_the_job_with_its_error(store: Store) -> None:
    job_id = put(store)
    claim_one(store)
    assert store.fail(A, job_id, "Fail: bad address", dead=True, max_attempts=10) is True
    row = store.get_job(job_id)
    assert row is not None
    assert (row.status, row.locked_by, row.last_error) == (JobState.DEAD, None, "Fail: bad address")
    assert row.finished_at is not None
    assert store.claim("work", B, 10, LEASE) == []


@pytest.mark.parametrize("dead", [False, True], ids=["retry", "dead"])
def test_fail_by_another_owner_changes_nothing(store: Store, dead: bool) -> None:
    job_id = put(store)
    claim_one(store, A)
    assert store.fail(B, job_id, "not mine", dead=dead, max_attempts=10) is False
    row = store.get_job(job_id)
    assert row is not None
    assert (row.status, row.locked_by, row.last_error) == (JobState.RUNNING, A, None)


def test_fail_without_max_attempts_keeps_the_jobs_own_limit(store: Store) -> None:
    job_id = put(store, max_attempts=3)
    claim_one(store)
    assert store.fail(A, job_id, "boom", dead=False)
    row = store.get_job(job_id)
    assert row is not None and row.max_attempts == 3


YEAR = 365 * 86400.0


@pytest.mark.parametrize("delay", [1e10, 1e300, float("inf"), float("nan")])
@pytest.mark.parametrize("how", ["retry", "snooze"])
def test_a_wait_past_what_the_backend_holds_is_written_as_a_year(
    store: Store, how: str, delay: float
) -> None:
    """1e10 s reaches past 2038 (MariaDB's TIMESTAMP refused it with 1292); inf and nan
    are no microseconds at all. Either write is taken, the wait cut to a year (issue 22.2)."""
    job_id = put(store)
    claim_one(store)
    before = store.db_now()
    if how == "retry":
        assert store.fail(A, job_id, "boom", dead=False, delay=delay, max_attempts=5) is True
    else:
        assert store.snooze(A, job_id, delay, max_snoozes=5) is SnoozeWritten.SNOOZED
    row = store.get_job(job_id)
    assert row is not None and (row.status, row.locked_by) == (JobState.SCHEDULED, None)
    assert before + YEAR - 60 <= row.run_at.timestamp() <= store.db_now() + YEAR + 60


def test_release_without_counting_undoes_the_attempt(store: Store) -> None:
    job_id = put(store)
    claim_one(store, A)
    assert store.release(A, [job_id]) == 1
    row = store.get_job(job_id)
    assert row is not None and (row.status, row.attempts, row.locked_by) == (
        JobState.READY,
        0,
        None,
    )
    [again] = store.claim("work", B, 1, LEASE)  # ready at once, for anyone
    assert (again.id, again.attempts) == (job_id, 1)


def test_release_counting_the_attempt_keeps_it(store: Store) -> None:
    job_id = put(store)
    claim_one(store, A)
    assert store.release(A, [job_id], count_attempt=True) == 1
    row = store.get_job(job_id)
    assert row is not None and (row.status, row.attempts) == (JobState.READY, 1)


def test_release_by_another_owner_changes_nothing(store: Store) -> None:
    job_id = put(store)
    claim_one(store, A)
    assert store.release(B, [job_id]) == 0
    assert store.release(B, [job_id], count_attempt=True) == 0
    row = store.get_job(job_id)
    assert row is not None and (row.status, row.locked_by, row.attempts) == (JobState.RUNNING, A, 1)


def test_a_row_with_the_largest_attempts_is_claimed_not_refused(store: Store, db_url: str) -> None:
    """A raw row holding INT's top in `attempts` must not fail every claim (MariaDB 1264)."""
    job_id = put(store)
    sql(db_url, "UPDATE forkq_jobs SET attempts = 2147483647 WHERE id = ?", (job_id,))
    [row] = store.claim("work", A, 5, LEASE)
    assert row.id == job_id and row.attempts >= 2147483647
