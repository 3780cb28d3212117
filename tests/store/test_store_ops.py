"""The store contract, run against a real SQLite file and a real MariaDB (`db_url`):
what operators and the master ask of it (retry, purge, pause, stats, due queues and
promotion, job lists), the processes table, locks, schedule slots, alert state and errors.
Claiming, leases, completion and failure: test_store.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from store_util import LEASE, A, B, claim_one, job, put, status
from util import (
    backdate,
    count_rows,
    free_tcp_port,
    insert_raw_ahead,
    mysql_connect,
    sqlite_url_for,
    wait_until,
)

from supervisor.errors import ConnectionLost, DatabaseError, DuplicateKey
from supervisor.models import JobState, QueueTimes
from supervisor.store import SCHEDULE_AHEAD, Store, open_store

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
    assert store.retry_dead("email") == (2, [])
    assert [status(store, i) for i in mail] == ["ready", "ready"]
    assert status(store, report) == "dead"
    assert store.retry_dead() == (1, [])
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
    # One claim each: every one starts (the second and third of a batch of three would be
    # claimed behind the first, not running, until they start).
    assert [len(store.claim("s", A, 1, LEASE)) for _ in range(3)] == [1, 1, 1]
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


def test_poll_tells_how_long_until_the_first_ready_job(store: Store) -> None:
    put(store, "now")
    put(store, "later", delay=60)
    put(store, "later", delay=120)
    put(store, "busy")
    store.claim("busy", A, 1, LEASE)
    put(store, "soon", delay=1)  # within the promotion horizon: ready, not yet due
    times = store.poll(["now", "later", "busy", "empty", "soon"])
    due = {q: t.ready_in for q, t in times.items() if t.ready_in is not None}
    assert set(due) == {"now", "soon"}  # "later" waits as scheduled
    assert due["now"] <= 0
    assert 0 < due["soon"] <= 1
    assert store.poll([]) == {}


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
def test_an_unopenable_sqlite_path_is_refused_or_unreachable(tmp_path: Path, where: str) -> None:
    """A path that names a directory is there and never opens: refused (a DatabaseError,
    not waited for as a lost connection). One under a regular file cannot be made by
    `forkq schema apply` (the only opener that makes a missing file): unreachable."""
    if where == "directory":  # the path names a directory, not a file
        path = tmp_path / "a-directory.db"
        path.mkdir()
        with pytest.raises(DatabaseError, match="cannot open the SQLite database") as caught:
            open_store(sqlite_url_for(path)).schema_version()
        assert not isinstance(caught.value, ConnectionLost)
        return
    (tmp_path / "a-file").write_text("")  # a parent of the path is a regular file
    path = tmp_path / "a-file" / "sub" / "forkq.db"
    with pytest.raises(ConnectionLost, match="unreachable"):
        open_store(sqlite_url_for(path)).apply_schema()


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


def test_settling_a_dead_workers_job_leaves_one_another_worker_holds_now(store: Store) -> None:
    """The master settles a gone child's running job (attempt counted) after an outage, by
    which time the lease reaper may have given the job to another worker: that run is
    left alone, and the master is told it settled nothing, so it says nothing of it."""
    from supervisor.cluster.chores import settle_owner

    job_id = put(store)
    assert claim_one(store, A) == job_id
    assert settle_owner(store, A, job_id, "killed at shutdown", False) == (1, True)
    assert claim_one(store, B) == job_id  # back to ready, uncounted: B runs it
    assert settle_owner(store, A, job_id, "worker died (killed by SIGKILL)") == (0, False)
    row = store.get_job(job_id)
    assert row is not None and row.status == JobState.RUNNING and row.locked_by == B
