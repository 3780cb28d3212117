"""Payloads larger than the database takes (issue 12, item 7).

A MySQL/MariaDB server refuses a statement longer than its `max_allowed_packet` by
closing the connection while the client still writes it: the app used to see
"database unreachable (2006)", as in an outage, and could retry for ever. Now the
store compares the statement with the session's max_allowed_packet before sending
and raises `PayloadTooLarge` (a forkq error the caller can catch, naming both sizes
and the setting); nothing is sent and the connection stays usable. A batch whose
rows fit one by one is split into statements that fit. SQLite refuses a value longer
than SQLITE_LIMIT_LENGTH: the same error, naming that limit.

A private server whose max_allowed_packet is 1 MB: tests/faults/test_faults_payload_limits.py.
"""

from __future__ import annotations

import sqlite3

import pytest
from util import count_rows, native_connection

from supervisor import PayloadTooLarge, Queue
from supervisor.errors import DatabaseError, ForkqError
from supervisor.store import open_store
from supervisor.store.sqlite import SQLiteStore

pytestmark = pytest.mark.timeout(300)

MB = 1024 * 1024


def payload_of(size: int) -> dict[str, str]:
    return {"blob": "x" * size}


# --- the shared server (max_allowed_packet 16 MB): refused before anything is sent ----------


def test_a_50_mb_payload_is_refused_as_too_large_not_as_an_outage(
    producer: Queue, mysql_db_url: str
) -> None:
    producer.enqueue("t.noop", {"before": True})
    with pytest.raises(PayloadTooLarge) as caught:
        producer.enqueue("t.noop", payload_of(50 * MB))
    message = str(caught.value)
    assert "max_allowed_packet" in message and "50.0 MB" in message and "16.0 MB" in message
    assert not isinstance(caught.value, DatabaseError)  # not an outage to retry
    assert isinstance(caught.value, ForkqError)
    assert "unreachable" not in message
    producer.enqueue("t.noop", {"after": True})  # the same producer goes on
    assert count_rows(mysql_db_url, "forkq_jobs") == 2


def test_a_batch_holding_one_oversized_job_is_refused_whole(
    producer: Queue, mysql_db_url: str
) -> None:
    jobs = [{"handler": "t.noop", "payload": {"n": n}} for n in range(3)]
    jobs.insert(1, {"handler": "t.noop", "payload": payload_of(20 * MB)})
    with pytest.raises(PayloadTooLarge, match="max_allowed_packet"):
        producer.enqueue_many(jobs)
    assert count_rows(mysql_db_url, "forkq_jobs") == 0  # one transaction: none of them


def test_an_oversized_job_on_the_callers_connection_is_refused_too(
    producer: Queue, mysql_db_url: str
) -> None:
    conn = native_connection(mysql_db_url)
    try:
        with pytest.raises(PayloadTooLarge, match="max_allowed_packet"):
            producer.enqueue("t.noop", payload_of(20 * MB), connection=conn)
        producer.enqueue("t.noop", {"small": True}, connection=conn)  # the caller goes on
        conn.commit()
    finally:
        conn.close()
    assert count_rows(mysql_db_url, "forkq_jobs") == 1


# --- SQLite ---------------------------------------------------------------------------------------


def test_sqlite_refuses_a_payload_over_its_length_limit(sqlite_db_url: str) -> None:
    store = open_store(sqlite_db_url)
    assert isinstance(store, SQLiteStore)
    queue = Queue(store=store)
    try:
        store._connection().setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100_000)  # as an app may set it
        with pytest.raises(PayloadTooLarge) as caught:
            queue.enqueue("t.noop", payload_of(200_000))
        assert "SQLITE_LIMIT_LENGTH" in str(caught.value) and "195.3 KB" in str(caught.value)
        with pytest.raises(PayloadTooLarge):
            queue.enqueue_many(
                [{"handler": "t.noop"}, {"handler": "t.noop", "payload": payload_of(200_000)}]
            )
        queue.enqueue("t.noop", payload_of(50_000))
    finally:
        queue.close()
    assert count_rows(sqlite_db_url, "forkq_jobs") == 1


def test_sqlite_on_the_callers_connection_refuses_it_too(sqlite_db_url: str) -> None:
    conn = native_connection(sqlite_db_url)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100_000)
    queue = Queue(sqlite_db_url)
    try:
        with pytest.raises(PayloadTooLarge, match="SQLITE_LIMIT_LENGTH"):
            queue.enqueue("t.noop", payload_of(200_000), connection=conn)
        conn.commit()
    finally:
        conn.close()
        queue.close()
    assert count_rows(sqlite_db_url, "forkq_jobs") == 0


def test_sqlite_takes_a_50_mb_payload(sqlite_db_url: str) -> None:
    queue = Queue(sqlite_db_url)
    try:
        job_id = queue.enqueue("t.noop", payload_of(50 * MB))
        row = queue.get(job_id)
        assert row is not None and len(row.payload) > 50 * MB
    finally:
        queue.close()


def test_a_kept_return_value_too_long_for_the_database_is_named_before_it_is_sent(
    db_url: str,
) -> None:
    """What the worker asks before it writes a kept value (keeping.py): a refused write
    would look like an outage and be tried for ever."""
    store = open_store(db_url)
    try:
        if isinstance(store, SQLiteStore):
            store._connection().setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100_000)
            long_value, limit_named = "x" * 200_000, "SQLITE_LIMIT_LENGTH"
        else:
            long_value, limit_named = "x" * 17 * MB, "max_allowed_packet (16.0 MB)"
        assert store.too_large_to_keep(1, "q", '"short"') is None
        assert store.too_large_to_keep(1, "q", "x" * 50_000) is None
        refused = store.too_large_to_keep(1, "q", long_value)
        assert refused is not None and refused.startswith("its return value is ")
        assert limit_named in refused and "out of the return value" in refused
    finally:
        store.close()
