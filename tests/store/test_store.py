"""The store contract, run against a real SQLite file and a real MariaDB (`db_url`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from util import (
    backdate,
    count_rows,
    free_tcp_port,
    insert_raw_ahead,
    mysql_connect,
    sql,
    sqlite_url_for,
    wait_until,
)

from supervisor.errors import ConnectionLost, DatabaseError, DuplicateKey
from supervisor.models import JobState, NewJob, QueueTimes
from supervisor.queue import build_job
from supervisor.store import SCHEDULE_AHEAD, Store, open_store

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
        assert row.locked_until is not None and row.started_at is not None
        assert row.locked_until > row.started_at


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


# --- operator commands ------------------------------------------------------------------------


def make_dead(store: Store, queue: str = "work") -> int:
    job_id = put(store, queue, priority=1000)  # claimed ahead of anything else waiting
    [row] = store.claim(queue, A, 1, LEASE)
    assert row.id == job_id
    assert store.fail(A, job_id, "dead on purpose", dead=True, max_attempts=1)
    return job_id


def test_retry_jobs_makes_dead_jobs_ready_but_leaves_running_ones(store: Store) -> None:
    dead = make_dead(store)
    running = put(store)
    claim_one(store, A)
    assert store.retry_jobs([dead, running]) == 1
    row = store.get_job(dead)
    assert row is not None
    assert (row.status, row.attempts, row.finished_at) == (JobState.READY, 0, None)
    assert status(store, running) == "running"
    assert claim_one(store, B) == dead


def test_retry_dead_retries_every_dead_job_of_a_queue(store: Store) -> None:
    mail = [make_dead(store, "email"), make_dead(store, "email")]
    report = make_dead(store, "reports")
    assert store.retry_dead("email") == 2
    assert [status(store, i) for i in mail] == ["ready", "ready"]
    assert status(store, report) == "dead"
    assert store.retry_dead() == 1
    assert status(store, report) == "ready"


def test_purge_deletes_finished_jobs_older_than_the_age(db_url: str, store: Store) -> None:
    old_done, new_done = put(store), put(store)
    store.claim("work", A, 2, LEASE)
    assert store.complete(A, [old_done, new_done], "keep") == 2
    old_dead = make_dead(store)
    backdate(db_url, "forkq_jobs", "finished_at", "id", old_done, 2 * 86400)
    backdate(db_url, "forkq_jobs", "finished_at", "id", old_dead, 2 * 86400)

    assert store.purge("done", older_than=86400) == 1
    assert store.get_job(old_done) is None
    assert status(store, new_done) == "done"
    assert status(store, old_dead) == "dead"  # only the status asked for
    assert store.purge("dead", older_than=86400) == 1
    assert store.get_job(old_dead) is None
    assert store.purge("done", older_than=86400) == 0


def test_purge_archive_deletes_archived_jobs_older_than_the_age(db_url: str, store: Store) -> None:
    old, new = put(store), put(store)
    store.claim("work", A, 2, LEASE)
    assert store.complete(A, [old, new], "archive") == 2
    backdate(db_url, "forkq_jobs_archive", "finished_at", "id", old, 2 * 86400)
    assert store.purge_archive(older_than=86400) == 1
    assert count_rows(db_url, "forkq_jobs_archive", "id = ?", (old,)) == 0
    assert count_rows(db_url, "forkq_jobs_archive", "id = ?", (new,)) == 1


def test_pause_and_resume_are_recorded_per_queue(store: Store) -> None:
    assert store.paused_queues() == set()
    store.set_paused("email", True)
    store.set_paused("reports", True)
    store.set_paused("email", True)  # twice is fine
    assert store.paused_queues() == {"email", "reports"}
    store.set_paused("email", False)
    assert store.paused_queues() == {"reports"}
    assert {s.queue: s.paused for s in store.stats()} == {"reports": True}


def test_stats_count_each_state_per_queue(store: Store) -> None:
    done, dead, running = store.insert_many([job("s", priority=9) for _ in range(3)])
    assert len(store.claim("s", A, 3, LEASE)) == 3
    store.complete(A, [done], "keep")
    store.fail(A, dead, "boom", dead=True, max_attempts=1)
    put(store, "s", run_at=datetime.now(UTC) - timedelta(seconds=90))
    put(store, "s")
    put(store, "s", delay=3600)
    put(store, "other")
    store.set_paused("idle", True)

    stats = {s.queue: s for s in store.stats()}

    assert set(stats) == {"s", "other", "idle"}
    s = stats["s"]
    assert (s.ready, s.delayed, s.running, s.dead, s.done, s.paused) == (2, 1, 1, 1, 1, False)
    assert 89 <= s.oldest_ready_age < 3600
    assert (stats["other"].ready, stats["other"].dead) == (1, 0)
    assert (stats["idle"].ready, stats["idle"].paused) == (0, True)
    assert status(store, running) == "running"


def test_due_queues_tells_how_long_until_the_first_ready_job(store: Store) -> None:
    put(store, "now")
    put(store, "later", delay=60)
    put(store, "later", delay=120)
    put(store, "busy")
    store.claim("busy", A, 1, LEASE)
    put(store, "soon", delay=1)  # within the promotion horizon: ready, not yet due
    due = store.due_queues(["now", "later", "busy", "empty", "soon"])
    assert set(due) == {"now", "soon"}  # "later" waits as scheduled
    assert due["now"] <= 0
    assert 0 < due["soon"] <= 1
    assert store.due_queues([]) == {}


def test_poll_tells_when_scheduled_jobs_fall_due_and_promotion_makes_them_claimable(
    store: Store,
) -> None:
    ids = [put(store, "later", delay=60), put(store, "later", delay=120)]
    times = store.poll(["later", "empty"])
    assert times["empty"] == QueueTimes(None, None, None)
    later = times["later"]
    assert later.ready_in is None and later.last_ready_in is None
    assert later.scheduled_in is not None and 30 < later.scheduled_in <= 60
    assert store.promote("later") == 0  # not within the horizon yet
    assert [status(store, i) for i in ids] == ["scheduled", "scheduled"]


def test_promotion_readies_only_jobs_about_to_fall_due_and_never_makes_them_early(
    store: Store,
) -> None:
    near = put(store, "q", delay=SCHEDULE_AHEAD + 0.5)  # stored scheduled
    far = put(store, "q", delay=3600)
    assert status(store, near) == "scheduled"
    wait_until(lambda: store.promote("q") == 1, timeout=5, message="near job promoted")
    assert [status(store, near), status(store, far)] == ["ready", "scheduled"]
    row = store.get_job(near)
    assert row is not None and row.run_at.timestamp() > store.db_now()  # ready, still ahead
    assert store.claim("q", A, 10, LEASE) == []  # never early
    [claimed] = wait_until(lambda: store.claim("q", A, 10, LEASE), timeout=5, message="due")
    assert claimed.id == near


def test_a_raw_insert_far_ahead_is_demoted_out_of_the_claim_range(
    store: Store, db_url: str
) -> None:
    far = insert_raw_ahead(db_url, "q", 3600)
    assert status(store, far) == "ready"  # the column's default
    times = store.poll(["q"])["q"]
    assert times.last_ready_in is not None and times.last_ready_in > 3000
    assert store.demote("q") == 1
    assert status(store, far) == "scheduled"
    assert store.poll(["q"])["q"].last_ready_in is None


def test_count_ready_counts_due_jobs_up_to_the_cap(store: Store) -> None:
    store.insert_many([job() for _ in range(5)])
    put(store, delay=3600)
    put(store, "other")
    assert store.count_ready("work") == 5
    assert store.count_ready("work", cap=3) == 3
    assert store.count_ready("nothing") == 0


def test_list_jobs_filters_by_status_and_queue_newest_first(store: Store) -> None:
    first, second = put(store), put(store)
    other = put(store, "other")
    dead = make_dead(store)
    assert [r.id for r in store.list_jobs(queue="work")] == [dead, second, first]
    assert [r.id for r in store.list_jobs(status="dead")] == [dead]
    assert [r.id for r in store.list_jobs(status="ready", queue="other")] == [other]
    assert len(store.list_jobs(limit=2)) == 2


# --- processes --------------------------------------------------------------------------------


def test_processes_register_beat_go_stale_and_are_removed(db_url: str, store: Store) -> None:
    store.register_process("h:1:m", "h", 1, "master")
    store.register_process("h:2:w", "h", 2, "worker", pool="email", master="h:1:m")
    store.register_process("h:2:w", "h", 2, "worker", pool="email", master="h:1:m")  # again: fine

    listed = {p.name: p for p in store.list_processes()}
    assert set(listed) == {"h:1:m", "h:2:w"}
    worker = listed["h:2:w"]
    assert (worker.host, worker.pid, worker.role, worker.pool, worker.master) == (
        "h",
        2,
        "worker",
        "email",
        "h:1:m",
    )
    assert store.stale_processes(older_than=60) == []

    backdate(db_url, "forkq_processes", "heartbeat_at", "name", "h:1:m", 120)
    backdate(db_url, "forkq_processes", "heartbeat_at", "name", "h:2:w", 120)
    assert {p.name for p in store.stale_processes(older_than=60)} == {"h:1:m", "h:2:w"}

    assert store.beat(["h:2:w"]) == 1
    assert [p.name for p in store.stale_processes(older_than=60)] == ["h:1:m"]

    assert store.remove_processes(["h:1:m", "h:2:w", "h:3:gone"]) == 2
    assert store.list_processes() == []


# --- locks ----------------------------------------------------------------------------------------


def test_a_lock_excludes_a_second_owner_until_released(store: Store) -> None:
    assert store.try_lock("chores", A, 60) is True
    assert store.try_lock("chores", B, 60) is False
    assert store.try_lock("other", B, 60) is True  # locks are per name
    assert store.release_lock("chores", A) is True
    assert store.try_lock("chores", B, 60) is True
    [(row, live), _] = sorted(store.list_locks(), key=lambda item: item[0].name)
    assert (row.name, row.owner, live) == ("chores", B, True)


def test_an_expired_lock_can_be_taken_by_another_owner(store: Store) -> None:
    assert store.try_lock("chores", A, 0.3) is True
    assert store.try_lock("chores", B, 60) is False

    wait_until(lambda: store.try_lock("chores", B, 60), timeout=10, message="lock expiry")

    assert store.renew_lock("chores", A, 60) is False  # A's lease is over
    assert store.release_lock("chores", A) is False
    assert store.try_lock("chores", A, 60) is False
    [(row, live)] = store.list_locks()
    assert (row.owner, live) == (B, True)


def test_only_the_owner_renews_or_releases_a_lock(store: Store) -> None:
    assert store.try_lock("chores", A, 60)
    [(before, _)] = store.list_locks()
    assert store.renew_lock("chores", B, 3600) is False
    assert store.release_lock("chores", B) is False
    assert store.try_lock("chores", B, 60) is False
    assert store.renew_lock("chores", A, 3600) is True
    [(after, live)] = store.list_locks()
    assert live and after.owner == A
    assert after.expires_at - before.expires_at > timedelta(minutes=50)


def test_renewing_an_expired_lock_fails(store: Store) -> None:
    assert store.try_lock("chores", A, 0.2)
    wait_until(lambda: not store.list_locks()[0][1], timeout=10, message="lock expiry")
    assert store.renew_lock("chores", A, 60) is False


# --- schedules and alerts -------------------------------------------------------------------------


def test_a_schedule_slot_enqueues_once(store: Store) -> None:
    slot = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    nightly = job("reports", handler="reports.nightly")
    first = store.enqueue_slot("nightly", slot, nightly)
    assert first is not None
    assert store.enqueue_slot("nightly", slot, nightly) is None
    assert store.enqueue_slot("hourly", slot, nightly) is not None  # per schedule
    following = store.enqueue_slot("nightly", slot + 86400, nightly)
    assert following is not None and following != first
    assert len(store.list_jobs(queue="reports")) == 3
    assert store.last_slot("nightly") == pytest.approx(slot + 86400)
    assert store.last_slot("never") is None


def test_alert_state_round_trips(store: Store) -> None:
    assert store.load_alerts() == {}
    since = 1_767_225_600.25
    detail = {"figure": 1500, "threshold": 1000, "message": "email: 1500 ready > 1000"}
    store.save_alert("max_ready:email", "firing", detail, since, None)
    loaded = store.load_alerts()["max_ready:email"]
    assert (loaded["state"], loaded["detail"], loaded["notified_at"]) == ("firing", detail, None)
    assert loaded["since"] == pytest.approx(since, abs=1e-3)

    store.save_alert("max_ready:email", "ok", {}, since + 60, since + 30)
    loaded = store.load_alerts()["max_ready:email"]
    assert (loaded["state"], loaded["detail"]) == ("ok", {})
    assert loaded["since"] == pytest.approx(since + 60, abs=1e-3)
    assert loaded["notified_at"] == pytest.approx(since + 30, abs=1e-3)


# --- errors ---------------------------------------------------------------------------------------


def test_a_duplicate_key_is_raised_as_duplicate_key(store: Store) -> None:
    params = {"schedule": "nightly", "slot": 1_767_225_600.0}
    store._run("insert_slot", **params)
    with pytest.raises(DuplicateKey) as caught:
        store._run("insert_slot", **params)
    assert isinstance(caught.value, DatabaseError)
    assert caught.value.__cause__ is not None  # raised from the driver's error


def test_an_unreachable_mysql_server_is_connection_lost_without_the_password() -> None:
    password = "s3cret-Pa55word"
    store = open_store(f"mysql://forkq:{password}@127.0.0.1:{free_tcp_port()}/forkq", timeout=2)
    with pytest.raises(ConnectionLost) as caught:
        store.schema_version()
    assert "unreachable" in str(caught.value)
    assert password not in str(caught.value)
    assert password not in repr(caught.value)
    url = store.url  # type: ignore[attr-defined]  # the backend's parsed URL
    assert password not in repr(url) and password not in str(url)


@pytest.mark.parametrize(
    "where",
    [
        "directory",
        "under-a-file",
    ],
)
def test_an_unopenable_sqlite_path_is_connection_lost(tmp_path: Path, where: str) -> None:
    if where == "directory":  # the path names a directory, not a file
        path = tmp_path / "a-directory.db"
        path.mkdir()
    else:  # a parent of the path is a regular file
        (tmp_path / "a-file").write_text("")
        path = tmp_path / "a-file" / "sub" / "forkq.db"
    store = open_store(sqlite_url_for(path))
    with pytest.raises(ConnectionLost, match="unreachable"):
        store.schema_version()


def test_a_killed_idle_mysql_connection_is_replaced_before_the_next_call(
    mysql_db_url: str,
) -> None:
    """The server ended the session while it was idle: nothing of the next statement was
    sent, so it goes on a new connection (tests/store/test_reconnect.py has the rest)."""
    store = open_store(mysql_db_url)
    try:
        job_id = put(store)
        admin = mysql_connect(mysql_db_url)
        try:
            with admin.cursor() as cursor:
                others = (
                    "SELECT ID FROM information_schema.PROCESSLIST"
                    " WHERE DB = DATABASE() AND ID <> CONNECTION_ID()"
                )
                cursor.execute(others)
                for (thread_id,) in cursor.fetchall():
                    cursor.execute(f"KILL CONNECTION {int(thread_id)}")
                wait_until(lambda: not cursor.execute(others), message="killed sessions gone")
        finally:
            admin.close()
        row = store.get_job(job_id)
        assert row is not None and row.id == job_id
    finally:
        store.close()
