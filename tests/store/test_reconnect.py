"""A long-lived producer outlives its connection (issue 12, item 6).

A web app keeps one `Queue` per process for hours. Between two enqueues the server
may restart, an operator may `KILL` the connection, or the server may time it out
(`wait_timeout`). The server hung up while the connection sat idle, so the next
statement has not been sent: forkq opens a new connection and sends it there, and
the app never sees an error. A statement that may have reached the server (the
connection died while it ran) is never sent twice: a retried INSERT could enqueue a
job twice. Inside a transaction nothing is retried silently.

Here on the shared server, connections killed from another session; a private server
restarted or timing connections out: tests/faults/test_faults_reconnect.py.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from typing import Any

import pytest
from util import count_rows, mysql_connect, wait_until

from supervisor import Queue
from supervisor.dburl import parse_database_url
from supervisor.errors import ConnectionLost
from supervisor.models import NewJob
from supervisor.store import open_store
from supervisor.store.mysql import MySQLStore

pytestmark = pytest.mark.timeout(180)


def connection_id(queue: Queue) -> int:
    """The server's id of the queue's own connection (the one the app holds)."""
    store = queue.store
    assert isinstance(store, MySQLStore)
    return int(store._connection().thread_id())


def alive(url: str, conn_id: int) -> bool:
    conn = mysql_connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s", (conn_id,)
            )
            return bool(cursor.fetchone()[0])
    finally:
        conn.close()


def kill(url: str, conn_id: int) -> None:
    """`KILL <id>` from another session of the same user (no SUPER needed for one's own)."""
    conn = mysql_connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute("KILL %s", (conn_id,))
    finally:
        conn.close()
    wait_until(lambda: not alive(url, conn_id), timeout=10, message="the killed session gone")


# --- the shared server: connections killed from another session ----------------------------------


def test_the_first_enqueue_after_a_kill_goes_through(producer: Queue, mysql_db_url: str) -> None:
    first = producer.enqueue("t.noop", {"n": 1})
    killed = connection_id(producer)
    kill(mysql_db_url, killed)
    second = producer.enqueue("t.noop", {"n": 2})
    assert connection_id(producer) != killed
    assert second > first
    assert count_rows(mysql_db_url, "forkq_jobs") == 2


def test_every_kind_of_call_reconnects_after_a_kill(producer: Queue, mysql_db_url: str) -> None:
    job_id = producer.enqueue("t.noop", {})
    for call in (
        lambda: producer.get(job_id),  # a read
        lambda: producer.enqueue_many(
            [{"handler": "t.noop"}, {"handler": "t.noop"}]
        ),  # a transaction
        lambda: producer.store.cancel_jobs([job_id], by="the test"),  # a transaction
        lambda: producer.enqueue("t.noop", {}, unique_key="once"),
    ):
        kill(mysql_db_url, connection_id(producer))
        call()
    assert count_rows(mysql_db_url, "forkq_jobs") == 4  # the first (cancelled); two; one unique
    assert count_rows(mysql_db_url, "forkq_jobs", "status = 'cancelled'") == 1


def test_a_statement_killed_while_it_ran_is_not_sent_again(
    producer: Queue, mysql_db_url: str
) -> None:
    """The INSERT reached the server and waits on a row lock when its connection is killed:
    it may have run, so it is reported, never retried (a retry would add a job)."""
    holder = mysql_connect(mysql_db_url, autocommit=False)
    try:
        with holder.cursor() as cursor:  # an open transaction holds the key's row lock
            cursor.execute(
                "INSERT INTO forkq_jobs (queue, handler, payload, unique_key) "
                "VALUES ('other', 't.noop', '{}', 'contended')"
            )
        producer.enqueue("t.noop", {"warm": True})  # the producer's connection is up
        victim = connection_id(producer)
        errors: list[BaseException] = []

        def enqueue() -> None:
            try:
                producer.enqueue("t.noop", {"n": 1}, unique_key="contended")
            except BaseException as exc:  # handed to the test thread
                errors.append(exc)

        thread = threading.Thread(target=enqueue)
        thread.start()
        wait_until(lambda: waiting_on_lock(mysql_db_url, victim), timeout=10, message="a lock wait")
        kill(mysql_db_url, victim)
        thread.join(timeout=30)
        assert not thread.is_alive()
        holder.rollback()  # the key is free again: a retried INSERT would now succeed
    finally:
        holder.close()
    assert len(errors) == 1 and isinstance(errors[0], ConnectionLost), errors
    assert count_rows(mysql_db_url, "forkq_jobs", "unique_key = 'contended'") == 0
    assert count_rows(mysql_db_url, "forkq_jobs") == 1  # only the warm-up job


def waiting_on_lock(url: str, conn_id: int) -> bool:
    conn = mysql_connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX "
                "WHERE trx_mysql_thread_id = %s AND trx_state = 'LOCK WAIT'",
                (conn_id,),
            )
            return bool(cursor.fetchone()[0])
    finally:
        conn.close()


def test_a_connection_lost_inside_a_transaction_is_reported_not_retried(
    mysql_db_url: str,
) -> None:
    store = open_store(mysql_db_url)
    assert isinstance(store, MySQLStore)
    params = store._params(
        **store.job_params(NewJob("t.noop", "{}", "default", 0, 0.0, None, None, None))
    )
    try:
        with pytest.raises(ConnectionLost), store._tx():
            store._insert_job(params)
            kill(mysql_db_url, int(store._connection().thread_id()))
            store._insert_job(params)
        # The first row went with its transaction; the store works on the next call.
        assert count_rows(mysql_db_url, "forkq_jobs") == 0
        store._insert_job(params)
        assert count_rows(mysql_db_url, "forkq_jobs") == 1
    finally:
        store.close()


# --- a server that takes the connection and never speaks ---------------------------------


def test_a_server_that_never_greets_fails_the_connect_within_its_own_timeout(
    mysql_db_url: str,
) -> None:
    """A hung server (or one behind a cut network) still accepts TCP: the kernel does.
    PyMySQL reads the greeting with the statements' read timeout, so a connect waited
    that out (a CLI 60 s per database); it waits the connect's own. Statements on a
    connection that did connect keep the long one."""
    silent = socket.create_server(("127.0.0.1", 0))  # listens; nobody accepts nor speaks
    try:
        url = parse_database_url(mysql_db_url)
        mute = dataclasses.replace(url, port=silent.getsockname()[1], nodes=())
        store = MySQLStore(mute, connect_timeout=1.0, read_timeout=150.0)
        started = time.monotonic()
        with pytest.raises(ConnectionLost):
            store.db_now()
        assert time.monotonic() - started < 75  # the connect's 1 s, never the 150 s
    finally:
        silent.close()
    store = MySQLStore(url, connect_timeout=1.0, read_timeout=30.0)
    try:  # a statement longer than the connect's timeout runs on the long one

        def sleep(conn: Any) -> Any:
            with conn.cursor() as cursor:
                cursor.execute("SELECT SLEEP(2)")
                return cursor.fetchone()[0]

        assert store._call(sleep) == 0
    finally:
        store.close()


def test_a_connect_that_times_out_says_so_not_a_lost_query(mysql_db_url: str) -> None:
    """PyMySQL words a greeting that never came "Lost connection to MySQL server during
    query (timed out)": the user is told what forkq waited for, where, and how long."""
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        url = parse_database_url(mysql_db_url)
        port = silent.getsockname()[1]
        mute = dataclasses.replace(url, port=port, nodes=())
        store = MySQLStore(mute, connect_timeout=1.0, read_timeout=150.0)
        with pytest.raises(ConnectionLost) as caught:
            store.db_now()
    finally:
        silent.close()
    message = str(caught.value)
    assert "during query" not in message, message
    assert f"127.0.0.1:{port} took the connection but did not complete the login" in message
    assert "within 1 s (the connect timeout)" in message, message
