"""MySQL: a transaction's BEGIN goes in one packet with its first statement, the write of
the last batch's successes with the claim's read, and the claim's COMMIT with its UPDATE
(issue 28): a claim of a batch is two round trips, not five, and a transaction is still
one (its statements never run outside it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from util import count_rows

from supervisor import Queue
from supervisor.errors import DatabaseError
from supervisor.store import open_store
from supervisor.store.core import SCHEMA_VERSION, micros
from supervisor.store.mysql import MySQLStore


@pytest.fixture
def store(mysql_db_url: str) -> Iterator[MySQLStore]:
    opened = open_store(mysql_db_url)
    assert isinstance(opened, MySQLStore)
    yield opened
    opened.close()


def enqueue(url: str, n: int) -> list[int]:
    queue = Queue(url)
    try:
        return [int(i) for i in queue.enqueue_many([{"handler": "t.noop"}] * n)]
    finally:
        queue.close()


def counting(store: MySQLStore) -> list[Any]:
    """The commands the store's connection sends from now on (one per round trip)."""
    conn = store._connection()
    sent: list[Any] = []
    send = conn._execute_command  # type: ignore[attr-defined]

    def counted(command: int, sql: Any) -> Any:
        sent.append(sql)
        return send(command, sql)

    conn._execute_command = counted  # type: ignore[attr-defined]
    return sent


def test_a_claim_with_the_last_batch_s_successes_is_two_round_trips(
    store: MySQLStore, mysql_db_url: str
) -> None:
    enqueue(mysql_db_url, 60)
    warm, _ = store.complete_and_claim({}, "default", "me", 20, 60.0)
    # (the first write of successes reads the schema version once per store)
    first, _ = store.complete_and_claim({"delete": [r.id for r in warm]}, "default", "me", 20, 60.0)
    assert len(first) == 20
    sent = counting(store)
    done = {"delete": [row.id for row in first]}
    second, written = store.complete_and_claim(done, "default", "me", 20, 60.0)
    assert (len(second), written) == (20, 20)
    assert len(sent) == 2, sent
    assert bytes(sent[0]).startswith(b"BEGIN;DELETE") and b"FOR UPDATE SKIP LOCKED" in sent[0]
    assert bytes(sent[-1]).endswith(b";COMMIT"), sent
    # Committed: another session sees the first batch gone and the second one claimed.
    assert count_rows(mysql_db_url, "forkq_jobs") == 20
    assert count_rows(mysql_db_url, "forkq_jobs", "status = 'running'") == 20
    assert not store._in_tx and not store._tx_pending


def test_a_transaction_that_fails_leaves_nothing_of_its_statements(
    store: MySQLStore, mysql_db_url: str
) -> None:
    ids = enqueue(mysql_db_url, 3)
    params = store._params(owner="me", ids=store._ids(ids), first=ids[0], lease_us=micros(60.0))
    with pytest.raises(RuntimeError), store.transaction():
        assert store.statement("claim_update", params) == 3  # its BEGIN went with it
        assert count_rows(mysql_db_url, "forkq_jobs", "status = 'running'") == 0  # not yet
        raise RuntimeError("the caller gives up")
    assert count_rows(mysql_db_url, "forkq_jobs", "status = 'ready'") == 3
    assert not store._in_tx and not store._tx_pending


def test_a_transaction_that_runs_nothing_sends_nothing(store: MySQLStore) -> None:
    sent = counting(store)
    with store.transaction(), store.transaction():  # nested: part of the outer one
        pass
    assert sent == []


def test_a_statement_after_the_one_that_commits_is_refused(
    store: MySQLStore, mysql_db_url: str
) -> None:
    """It would run outside the transaction: refused, and the store works after it."""
    ids = enqueue(mysql_db_url, 2)
    params = store._params(owner="me", ids=store._ids(ids), first=ids[0], lease_us=micros(60.0))
    with pytest.raises(DatabaseError, match="after its transaction's last"), store.transaction():
        store._execute_last("claim_update", params)
        store.statement("claim_update", params)
    assert count_rows(mysql_db_url, "forkq_jobs", "status = 'running'") == 2  # committed
    assert store.complete_and_claim({"delete": ids}, "default", "me", 5, 60.0) == ([], 2)


def test_a_claim_whose_write_fails_claims_nothing_and_keeps_the_successes(
    store: MySQLStore, mysql_db_url: str
) -> None:
    """The write and the read share a packet: when the write fails (here a lock wait that
    runs out behind another session's lock on one of the jobs), the server runs no read,
    the transaction is rolled back whole, and a second try writes the successes."""
    import pymysql

    from supervisor.dburl import parse_database_url

    enqueue(mysql_db_url, 40)
    first, _ = store.complete_and_claim({}, "default", "me", 20, 60.0)
    url = parse_database_url(mysql_db_url)
    other = pymysql.connect(
        host=url.host, port=url.port or 3306, user=url.user, password=url.password or "",
        database=url.database, autocommit=False,
    )  # fmt: skip
    try:
        with other.cursor() as cursor:
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
            cursor.execute("SELECT id FROM forkq_jobs WHERE id = %s FOR UPDATE", (first[0].id,))
        store._connection().query("SET SESSION innodb_lock_wait_timeout = 1")
        done = {"delete": [row.id for row in first]}
        with pytest.raises(DatabaseError), store.transaction():
            store.complete_and_select("me", done, store._params(queue="default", limit=20))
        assert count_rows(mysql_db_url, "forkq_jobs", "status = 'running'") == 20  # nothing
        assert not store._in_tx and not store._tx_pending
        other.rollback()
    finally:
        other.close()
    second, written = store.complete_and_claim(done, "default", "me", 20, 60.0)
    assert (len(second), written) == (20, 20)
    assert count_rows(mysql_db_url, "forkq_jobs") == 20


def test_a_session_is_set_up_in_one_round_trip_after_the_driver_s_own(
    mysql_db_url: str,
) -> None:
    """UTC, READ COMMITTED and the daemon's wait_timeout, sent together (the driver's
    init_command would be a round trip of its own)."""
    opened = open_store(mysql_db_url, session_timeout=77)
    try:
        assert isinstance(opened, MySQLStore)
        conn = opened._connection()
        with conn.cursor() as cursor:
            cursor.execute("SELECT @@session.time_zone, @@session.tx_isolation, @@wait_timeout")
            assert cursor.fetchone() == ("+00:00", "READ-COMMITTED", 77)
            cursor.execute("SHOW SESSION STATUS LIKE 'Com_set_option'")
            assert int(cursor.fetchone()[1]) == 4  # SET NAMES, then the 3 SETs of one request
    finally:
        opened.close()
    producer = open_store(mysql_db_url)  # no session_timeout: the server's default stays
    try:
        assert isinstance(producer, MySQLStore)
        with producer._connection().cursor() as cursor:
            cursor.execute("SELECT @@session.wait_timeout = @@global.wait_timeout, @@time_zone")
            assert cursor.fetchone() == (1, "+00:00")
    finally:
        producer.close()


def test_a_version_gate_is_asked_once_or_not_at_all_once_the_latest_is_checked(
    mysql_db_url: str,
) -> None:
    """A store asks each gate's version at its first use, once; after a check of the
    latest version (the master's boot) it asks none, nor does a forked child told it."""
    master, child = open_store(mysql_db_url), open_store(mysql_db_url)
    try:
        sent = counting(master)  # type: ignore[arg-type]
        assert master.has_deps_schema() and master.has_deps_schema()
        assert len(sent) == 1 and b"forkq_schema" in bytes(sent[0]), sent
        assert master.require_latest_schema() == SCHEMA_VERSION
        sent.clear()
        assert master.has_limits_schema() and master.has_attempts_table()
        assert sent == []
        child.schema_checked = master.schema_checked  # child.py: ChildSpec.schema
        sent = counting(child)  # type: ignore[arg-type]
        assert child.has_deps_schema() and child.has_timing_table() and sent == []
    finally:
        master.close()
        child.close()
