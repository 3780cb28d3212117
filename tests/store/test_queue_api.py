"""The producer API users call: `Queue.enqueue`, `enqueue_many`, transactional enqueue, locks."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from util import count_rows, native_connection

from supervisor import LockHeld, Queue, handler
from supervisor import registry as handler_registry
from supervisor.errors import UsageError
from supervisor.models import JobState
from supervisor.store import Store

OWNER = "host:1:test"


@pytest.fixture
def registered() -> Iterator[str]:
    """A handler registered for the test only (the registry is process-wide)."""
    name = "test.registered_mail"
    handler(name, queue="email", max_attempts=4)(lambda payload, job: None)
    yield name
    handler_registry._HANDLERS.pop(name, None)


def test_enqueue_stores_every_option(queue: Queue, store: Store) -> None:
    before = store.db_now()
    job_id = queue.enqueue(
        "email.send",
        {"to": "a@example.com", "tags": ["welcome"], "name": "Zoë"},
        queue="email",
        delay=60,
        priority=5,
        unique_key="welcome-42",
        max_attempts=5,
    )
    row = queue.get(job_id)
    assert row is not None
    assert (row.handler, row.queue, row.priority, row.unique_key, row.max_attempts) == (
        "email.send",
        "email",
        5,
        "welcome-42",
        5,
    )
    assert json.loads(row.payload) == {"to": "a@example.com", "tags": ["welcome"], "name": "Zoë"}
    assert (row.status, row.attempts, row.locked_by) == (JobState.SCHEDULED, 0, None)
    assert before + 59 <= row.run_at.timestamp() <= store.db_now() + 61
    assert store.claim("email", OWNER, 10, 30) == []  # delayed


def test_enqueue_defaults(queue: Queue, store: Store) -> None:
    job_id = queue.enqueue("misc.thing")
    row = queue.get(job_id)
    assert row is not None
    assert (row.queue, row.priority, row.max_attempts, row.unique_key) == ("default", 0, None, None)
    assert json.loads(row.payload) == {}
    assert [r.id for r in store.claim("default", OWNER, 10, 30)] == [job_id]


def test_enqueue_at_an_absolute_time_in_any_zone(queue: Queue, store: Store) -> None:
    when = datetime.now(UTC) + timedelta(hours=2)
    aware = queue.enqueue("misc.thing", run_at=when.astimezone(timezone(timedelta(hours=9))))
    naive = queue.enqueue("misc.thing", run_at=when.replace(tzinfo=None))  # naive is UTC
    for job_id in (aware, naive):
        row = queue.get(job_id)
        assert row is not None
        assert abs(row.run_at - when) < timedelta(milliseconds=1)


def test_a_run_at_reads_back_to_the_microsecond(queue: Queue, db_url: str) -> None:
    """Every microsecond of a run_at is kept: on MySQL a float bound as a DOUBLE literal
    lost one for about half of all values (FROM_UNIXTIME truncates)."""
    base = datetime(2030, 1, 1, tzinfo=UTC)
    given = [base + timedelta(seconds=s * 7919, microseconds=(s * 104729) % 1_000_000)
             for s in range(200)]  # fmt: skip
    rows = [queue.get(r.id) for r in queue.enqueue_many(
        [{"handler": "misc.thing", "run_at": when} for when in given[:100]]
    )]  # fmt: skip
    rows += [queue.get(queue.enqueue("misc.thing", run_at=when)) for when in given[100:150]]
    conn = native_connection(db_url)  # the caller's own transaction: not forkq's encoders
    try:
        ids = [queue.enqueue("misc.thing", run_at=when, connection=conn) for when in given[150:]]
        conn.commit()
    finally:
        conn.close()
    rows += [queue.get(job_id) for job_id in ids]
    assert [row.run_at if row else None for row in rows] == given


def test_enqueue_uses_the_registered_handlers_queue_and_attempts(
    queue: Queue, registered: str
) -> None:
    row = queue.get(queue.enqueue(registered, {"to": "x@example.com"}))
    assert row is not None and (row.queue, row.max_attempts) == ("email", 4)
    row = queue.get(queue.enqueue(registered, {}, queue="bulk", max_attempts=2))
    assert row is not None and (row.queue, row.max_attempts) == ("bulk", 2)


def test_enqueue_with_a_taken_unique_key_returns_the_existing_id(db_url: str, queue: Queue) -> None:
    first = queue.enqueue("email.send", {"n": 1}, unique_key="welcome-42")
    second = queue.enqueue("email.send", {"n": 2}, unique_key="welcome-42", priority=9)
    assert second == first
    assert count_rows(db_url, "forkq_jobs") == 1
    row = queue.get(first)
    assert row is not None and json.loads(row.payload) == {"n": 1} and row.priority == 0
    assert queue.enqueue("email.send", {"n": 3}, unique_key="welcome-43") != first


def test_a_unique_key_stays_taken_while_the_job_runs_and_while_it_is_kept(
    queue: Queue, store: Store
) -> None:
    job_id = queue.enqueue("email.send", unique_key="k")
    store.claim("default", OWNER, 1, 30)
    assert queue.enqueue("email.send", unique_key="k") == job_id  # running
    assert store.complete(OWNER, [job_id], "keep") == 1
    assert queue.enqueue("email.send", unique_key="k") == job_id  # done, within retention


def test_enqueue_many_returns_ids_in_input_order(queue: Queue) -> None:
    specs = [
        {"handler": "email.send", "payload": {"n": n}, "queue": "email", "priority": n % 3}
        for n in range(25)
    ]
    ids = queue.enqueue_many(specs)
    assert len(ids) == len(set(ids)) == 25
    for n, job_id in enumerate(ids):
        row = queue.get(job_id)
        assert row is not None
        assert (json.loads(row.payload), row.priority) == ({"n": n}, n % 3)


def test_enqueue_many_accepts_every_enqueue_option(queue: Queue, store: Store) -> None:
    when = datetime.now(UTC) - timedelta(minutes=1)
    [delayed, timed] = queue.enqueue_many(
        [
            {
                "handler": "a.b",
                "payload": [1],
                "queue": "q1",
                "delay": 3600,
                "priority": 2,
                "unique_key": "u1",
                "max_attempts": 3,
            },
            {"handler": "a.c", "queue": "q1", "run_at": when},
        ]
    )
    row = queue.get(delayed)
    assert row is not None
    assert (row.queue, row.priority, row.unique_key, row.max_attempts) == ("q1", 2, "u1", 3)
    timed_row = queue.get(timed)
    assert timed_row is not None and abs(timed_row.run_at - when) < timedelta(milliseconds=1)
    assert [r.id for r in store.claim("q1", OWNER, 10, 30)] == [timed]


def test_enqueue_many_with_unique_keys_returns_the_existing_ids(db_url: str, queue: Queue) -> None:
    existing = queue.enqueue("email.send", {"old": True}, unique_key="k0")
    ids = queue.enqueue_many(
        [
            {"handler": "email.send", "payload": {"i": 0}, "unique_key": "k1"},
            {"handler": "email.send", "payload": {"i": 1}, "unique_key": "k0"},
            {"handler": "email.send", "payload": {"i": 2}},
            {"handler": "email.send", "payload": {"i": 3}, "unique_key": "k1"},
        ]
    )
    assert ids[1] == existing  # against a row already there
    assert ids[3] == ids[0]  # twice within the batch
    assert len({ids[0], ids[1], ids[2]}) == 3
    assert count_rows(db_url, "forkq_jobs") == 3
    row = queue.get(ids[0])
    assert row is not None and json.loads(row.payload) == {"i": 0}


def test_enqueue_many_of_nothing_is_nothing(queue: Queue) -> None:
    assert queue.enqueue_many([]) == []


@pytest.mark.parametrize(
    "spec",
    [{"payload": {}}, {"handler": "a.b", "colour": "red"}],
    ids=["no-handler", "unknown-key"],
)
def test_enqueue_many_refuses_a_bad_spec_and_enqueues_nothing(
    db_url: str, queue: Queue, spec: dict[str, object]
) -> None:
    with pytest.raises(UsageError):
        queue.enqueue_many([{"handler": "a.b"}, spec])
    assert count_rows(db_url, "forkq_jobs") == 0


@pytest.mark.parametrize(
    "payload",
    [object(), {"when": datetime.now(UTC)}, {1, 2}, {"x": math.nan}, b"bytes"],
    ids=["object", "datetime", "set", "nan", "bytes"],
)
def test_payload_must_be_json_serialisable(db_url: str, queue: Queue, payload: object) -> None:
    with pytest.raises(UsageError, match="JSON"):
        queue.enqueue("email.send", payload)
    assert count_rows(db_url, "forkq_jobs") == 0


@pytest.mark.parametrize(
    "options",
    [
        {"delay": -1},
        {"delay": math.inf},
        {"priority": 2**31},
        {"max_attempts": 0},
        {"unique_key": ""},
        {"queue": "q" * 65},
        {"run_at": "2030-01-01T00:00:00Z"},
        {"run_at": 1_893_456_000.0},
    ],
    ids=[
        "negative-delay",
        "infinite-delay",
        "huge-priority",
        "zero-attempts",
        "empty-key",
        "long-queue",
        "run-at-text",
        "run-at-epoch",
    ],
)
def test_enqueue_refuses_bad_options_with_a_usage_error(
    db_url: str, queue: Queue, options: dict[str, object]
) -> None:
    with pytest.raises(UsageError):
        queue.enqueue("email.send", {}, **options)  # type: ignore[arg-type]
    assert count_rows(db_url, "forkq_jobs") == 0


# --- inside the caller's transaction -------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["rollback", "commit"])
def test_transactional_enqueue_exists_only_if_the_callers_transaction_commits(
    db_url: str, queue: Queue, store: Store, outcome: str
) -> None:
    conn = native_connection(db_url)  # PyMySQL (autocommit off) or sqlite3
    try:
        job_id = queue.enqueue(
            "email.send", {"to": "a@example.com"}, queue="email", connection=conn
        )
        assert isinstance(job_id, int) and job_id > 0
        if outcome == "commit":
            conn.commit()
        else:
            conn.rollback()
    finally:
        conn.close()
    expected = [job_id] if outcome == "commit" else []
    assert [row.id for row in store.list_jobs()] == expected
    assert [row.id for row in store.claim("email", OWNER, 10, 30)] == expected


def test_transactional_enqueue_is_invisible_until_the_caller_commits(
    db_url: str, queue: Queue, store: Store
) -> None:
    conn = native_connection(db_url)
    try:
        job_id = queue.enqueue("email.send", {}, connection=conn)
        assert store.get_job(job_id) is None  # other sessions do not see it yet
        conn.commit()
    finally:
        conn.close()
    assert store.get_job(job_id) is not None


def test_transactional_enqueue_with_a_taken_unique_key_returns_the_existing_id(
    db_url: str, queue: Queue
) -> None:
    existing = queue.enqueue("email.send", {"n": 1}, unique_key="order-7")
    conn = native_connection(db_url)
    try:
        again = queue.enqueue("email.send", {"n": 2}, unique_key="order-7", connection=conn)
        conn.commit()
    finally:
        conn.close()
    assert again == existing
    assert count_rows(db_url, "forkq_jobs") == 1


def test_enqueue_from_a_session_in_another_time_zone_is_due_now(mysql_db_url: str) -> None:
    queue = Queue(mysql_db_url)
    store = queue.store
    conn = native_connection(mysql_db_url, init_command="SET time_zone = '+09:00'")
    when = datetime.now(UTC) + timedelta(hours=3)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT @@session.time_zone")
            assert cursor.fetchone()[0] == "+09:00"
        now_id = queue.enqueue("email.send", {}, queue="tz", connection=conn)
        later_id = queue.enqueue("email.send", {}, queue="tz", run_at=when, connection=conn)
        conn.commit()
        now_row, later_row = store.get_job(now_id), store.get_job(later_id)
        assert now_row is not None and later_row is not None
        assert abs(now_row.run_at.timestamp() - store.db_now()) < 60  # not 9 hours off
        assert abs(later_row.run_at - when) < timedelta(milliseconds=1)
        assert [row.id for row in store.claim("tz", OWNER, 10, 30)] == [now_id]
    finally:
        conn.close()
        queue.close()


# --- locks --------------------------------------------------------------------------------------


def test_queue_lock_excludes_another_owner_and_is_released_on_exit(queue: Queue) -> None:
    with queue.lock("nightly-export", ttl=60) as held:
        with pytest.raises(LockHeld):
            queue.lock("nightly-export", ttl=60).__enter__()
        held.renew()
    with queue.lock("nightly-export", ttl=60) as again:  # released on exit
        assert again.held


def test_queue_opens_its_own_store_from_a_url(db_url: str) -> None:
    q = Queue(db_url)
    try:
        job_id = q.enqueue("email.send", {"n": 1})
        row = q.get(job_id)
        assert row is not None and row.handler == "email.send"
    finally:
        q.close()
    with pytest.raises(UsageError):
        Queue()


def test_a_parent_failure_rule_without_parents_is_refused_and_nothing_written(
    queue: Queue, db_url: str
) -> None:
    with pytest.raises(UsageError, match="on_parent_failure goes with depends_on"):
        queue.enqueue("t.noop", on_parent_failure="continue")
    with pytest.raises(UsageError, match="depends_on is not taken here"):
        queue.enqueue_many([{"handler": "t.noop", "depends_on": [1]}])
    assert count_rows(db_url, "forkq_jobs") == 0


def test_the_soft_timeout_is_importable_where_handlers_import_the_rest() -> None:
    from supervisor import JobTimeout
    from supervisor.errors import JobTimeout as Declared

    assert JobTimeout is Declared and issubclass(JobTimeout, BaseException)


def test_an_id_that_is_no_whole_number_is_a_usage_error(queue: Queue) -> None:
    """`q.cancel([1, 2])` raised a TypeError from inside the store, `q.result("abc")` a
    ValueError: a caller's mistake is a UsageError naming what was given."""
    job_id = queue.enqueue("t.job")
    for call in (queue.cancel, queue.result, queue.get, queue.batch_status, queue.wait):
        with pytest.raises(UsageError, match="id is a whole number from 1, not a list"):
            call([job_id])  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="id is a whole number from 1, not 'abc'"):
            call("abc")  # type: ignore[arg-type]
        for no_id in (0, -1, "0"):  # read as "gone" before, unlike any other bad id
            with pytest.raises(UsageError, match=f"from 1, not {no_id!r}"):
                call(no_id)  # type: ignore[arg-type]
    assert queue.result(str(job_id)).state == "ready"  # its digits as text still do
    assert queue.cancel(job_id)
