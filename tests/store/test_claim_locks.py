"""What a claim reads and locks on MySQL/MariaDB, from the server's own counters.

Jobs waiting for later are `scheduled`, outside the claim's index range, and forkq's
sessions run READ COMMITTED, so a claim locks about as many rows as it takes and no gap:
an application's INSERT into the same queue never waits on an open claim.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from util import mysql_connect

from supervisor.models import NewJob
from supervisor.store import Store, open_store
from supervisor.store.core import micros

SCHEDULED = 5_000
DUE = 3
LIMIT = 10


@pytest.fixture
def mysql_store(mysql_db_url: str) -> Iterator[Store]:
    store = open_store(mysql_db_url)
    yield store
    store.close()


def fill(store: Store) -> None:
    store.insert_many([NewJob("t.noop", "{}", queue="s", delay=86_400)] * SCHEDULED)
    store.insert_many([NewJob("t.noop", "{}", queue="s")] * DUE)
    store.insert_many([NewJob("t.noop", "{}", queue="other")] * 1_000)


def server_status(cursor: Any, name: str) -> int:
    cursor.execute("SHOW SESSION STATUS LIKE %s", (name,))
    return int(cursor.fetchone()[1])


def test_a_claim_locks_and_reads_only_what_it_takes(mysql_store: Store, mysql_db_url: str) -> None:
    fill(mysql_store)
    store: Any = mysql_store
    conn = store._connection()  # the store's own session: READ COMMITTED, as every claim runs
    watcher = mysql_connect(mysql_db_url)
    try:
        with conn.cursor() as cursor:
            before = server_status(cursor, "Handler_read_next") + server_status(
                cursor, "Handler_read_key"
            )
            conn.begin()
            cursor.execute(store.queries["claim_select"], {"queue": "s", "limit": LIMIT})
            claimed = cursor.fetchall()
            read = (
                server_status(cursor, "Handler_read_next")
                + server_status(cursor, "Handler_read_key")
                - before
            )
            with watcher.cursor() as other:
                other.execute(
                    "SELECT trx_rows_locked FROM information_schema.INNODB_TRX"
                    " WHERE trx_mysql_thread_id = %s",
                    (conn.thread_id(),),
                )
                [(locked,)] = other.fetchall()
                # An application's delayed INSERT into the same queue, while the claim is
                # open: with gap locks it would wait; here it must not wait at all.
                other.execute("SET SESSION innodb_lock_wait_timeout = 1")
                other.execute(
                    "INSERT INTO forkq_jobs (queue, handler, payload, run_at)"
                    " VALUES ('s', 't.noop', '{}', NOW(6) + INTERVAL %s MICROSECOND)",
                    (micros(3600),),
                )
                other.execute(
                    "INSERT INTO forkq_jobs (queue, handler, payload) VALUES ('s', 't.noop', '{}')"
                )
            watcher.commit()
            conn.rollback()
    finally:
        watcher.close()
    assert len(claimed) == DUE
    # Within a small constant of the claim size (each row's secondary and clustered
    # records count); before the scheduled status, every scheduled row was locked.
    assert locked <= 2 * LIMIT, f"{locked} rows locked for {DUE} claimed ({SCHEDULED} scheduled)"
    assert read <= 2 * LIMIT, f"{read} index reads for {DUE} claimed ({SCHEDULED} scheduled)"


def test_the_session_runs_read_committed(mysql_store: Store) -> None:
    store: Any = mysql_store
    with store._connection().cursor() as cursor:
        cursor.execute(
            "SHOW SESSION VARIABLES WHERE Variable_name IN ('tx_isolation', 'transaction_isolation')"
        )
        levels = {value for _, value in cursor.fetchall()}
    assert levels == {"READ-COMMITTED"}
