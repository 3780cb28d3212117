"""Fault injection against a private MariaDB: the server killed -9 and restarted under a
running daemon, worker connections killed server-side, a restart under a caller's open
transaction. Guarantee 1 (at least once: never lost) is what every test checks; the
duplicates that at-least-once allows are counted and printed.

Run with `make test-faults` (or `pytest -m faults -s tests/faults/test_faults_mariadb.py` to
see the figures). Every job is a `t.record` job: the handler appends `id,pid,...` to a
record file with one O_APPEND write, so the file says which jobs ran and how often.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
from daemon_util import Daemon, count_lines, record_ids, render_config
from private_mariadb import (  # noqa: F401 - fixtures
    Partition,
    PrivateMariaDB,
    Webhook,
    private_db_url,
    private_mariadb,
)
from util import mysql_connect, report_figures, wait_until

from supervisor import Queue, events, registry
from supervisor.config import Config, PoolConfig
from supervisor.daemon.master import DB_TIMEOUT as MASTER_DB_TIMEOUT
from supervisor.dburl import parse_database_url
from supervisor.errors import ConnectionLost
from supervisor.store import open_store
from supervisor.store.core import TRANSIENT_RETRIES
from supervisor.work.worker import Worker

# The classes PyMySQL raises, even after Django (install_as_MySQLdb) loaded a second
# copy of pymysql.err in this process: see supervisor/store/mysql_session.py.
DRIVER_ERRORS = sys.modules["pymysql.err"]

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

QUEUE = "work"
POOL = {"workers": 4, "timeout": 5}  # lease = timeout + 30 s: a lost claim comes back in ~35 s


# --- helpers ---------------------------------------------------------------------------------


def job_counts(server: PrivateMariaDB) -> dict[str, int]:
    rows = server.admin(
        f"SELECT status, COUNT(*) FROM `{server.database}`.forkq_jobs GROUP BY status"
    )
    return {str(status): int(n) for status, n in rows}


def enqueue_records(url: str, count: int, record: Path, seconds: float = 0.0) -> list[int]:
    payload: dict[str, Any] = {"file": str(record)}
    if seconds:
        payload["seconds"] = seconds
    queue = Queue(url)
    try:
        return queue.enqueue_many(
            [{"handler": "t.record", "payload": payload, "queue": QUEUE}] * count
        )
    finally:
        queue.close()


def drained(server: PrivateMariaDB) -> bool:
    """forkq_jobs is empty: every job done (deleted), none ready, running or dead."""
    return not job_counts(server)


def server_ports(process: psutil.Process, server_port: int) -> set[int]:
    """Local TCP ports of a process's connections to the server."""
    try:
        return {
            c.laddr.port
            for c in process.net_connections(kind="tcp")
            if c.raddr and c.raddr.port == server_port
        }
    except psutil.Error:
        return set()


def client_port(connection: dict[str, Any]) -> int | None:
    host = str(connection["HOST"] or "")
    port = host.rsplit(":", 1)[-1]
    return int(port) if ":" in host and port.isdigit() else None


def statement_kind(connection: dict[str, Any]) -> str:
    """What a PROCESSLIST row was doing: claiming, acknowledging, idle..."""
    text = " ".join(str(connection["INFO"] or "").split()).upper()
    if "FOR UPDATE SKIP LOCKED" in text or "SET STATUS = 'RUNNING'" in text:
        return "claim"
    if text.startswith("DELETE FROM FORKQ_JOBS"):
        return "ack"
    if connection["TRX"]:
        return "in_transaction" if connection["COMMAND"] == "Sleep" else "other_in_transaction"
    return "idle" if connection["COMMAND"] == "Sleep" else "other"


# --- the database killed -9 under a running daemon -------------------------------------------


def test_daemon_survives_two_database_crashes_and_loses_no_job(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    daemons: Any,
    webhook: Webhook,
    tmp_path: Path,
) -> None:
    total = 5000
    record = tmp_path / "record.csv"
    daemon: Daemon = daemons(private_db_url, pools={QUEUE: POOL})
    alerts = (
        "\n[alerts]\n"
        f"webhook_url = {json.dumps(webhook.url)}\n"
        'cooldown = "1h"\n'
        "\n[alerts.defaults]\n"
        "max_ready = 1000000\n"
        "max_dead = 0\n"
    )
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + alerts)
    daemon.start().wait_ready()
    master_pid = daemon.pid
    started = time.monotonic()
    ids = enqueue_records(private_db_url, total, record)
    assert len(set(ids)) == total

    outages = []
    for fraction in (0.25, 0.60):
        wait_until(
            lambda f=fraction: count_lines(record) >= total * f,
            timeout=120,
            interval=0.01,
            message=f"{fraction:.0%} of the jobs run",
        )
        at = count_lines(record)
        down = time.monotonic()
        private_mariadb.kill9()
        time.sleep(2.0)  # the outage itself, not a wait for something to happen
        private_mariadb.start()
        outages.append((at, round(time.monotonic() - down, 2)))
        assert daemon.alive(), f"the daemon died with the database: {daemon.describe()}"

    wait_until(
        lambda: drained(private_mariadb),
        timeout=150,
        interval=0.2,
        message="every job done (forkq_jobs empty)",
    )
    elapsed = time.monotonic() - started

    # The daemon lived through it: the same master, still arbitrating a full pool.
    assert daemon.alive() and daemon.pid == master_pid, daemon.describe()
    assert daemon.master_title() == "forkq: master"
    assert len(daemon.events(events.MASTER_STARTED)) == 1
    wait_until(
        lambda: len(daemon.pool_children(QUEUE)) == POOL["workers"],
        timeout=20,
        message="a full pool after the outages",
    )

    # At least once: every job ran, none lost; count the duplicates at-least-once allows.
    runs = record_ids(record)
    counted = Counter(runs)
    lost = set(ids) - set(counted)
    duplicates = len(runs) - len(counted)
    unknown = set(counted) - set(ids)
    report_figures(
        "mariadb kill -9 x2",
        jobs=total,
        faults=len(outages),
        killed_at_runs=[a for a, _ in outages],
        down_seconds=[d for _, d in outages],
        lost=len(lost),
        duplicates=duplicates,
        most_runs_of_one_job=max(counted.values()),
        seconds=round(elapsed, 1),
        webhook_messages=len(webhook.texts),
        child_crashes=len(daemon.events(events.CHILD_CRASHED)),
    )
    assert not lost, f"{len(lost)} jobs never ran: {sorted(lost)[:20]}"
    assert not unknown
    assert not daemon.events(events.JOB_FINISHED, outcome="dead"), "a job died"

    # Workers backed off while the server was away instead of spinning (after a back-off
    # an idle child waits for the master's wake-up, which needs the database), and came
    # back; the master said once per outage that the database was gone.
    unreachable = [e for e in daemon.events(events.DB_UNREACHABLE) if e.get("role") == "worker"]
    assert unreachable, "no worker noticed the outage"
    assert all(float(e["retry_in"]) > 0 for e in unreachable)
    per_child = Counter(e.get("pid") for e in unreachable)
    assert max(per_child.values()) <= 20, f"a worker retried in a tight loop: {per_child}"
    assert daemon.events(events.DB_RECONNECTED), "no worker logged its reconnect"
    master_said = [e for e in daemon.events(events.DB_UNREACHABLE) if e.get("role") == "master"]
    assert len(outages) <= len(master_said) <= 2 * len(outages), master_said
    assert len(daemon.events(events.DB_REACHABLE_AGAIN)) == len(master_said)

    # The master alerted once the database went away and said when it came back.
    wait_until(
        lambda: any("resolved" in t and "database" in t for t in webhook.texts),
        timeout=15,
        message=f"a resolved database alert (got {webhook.texts})",
    )
    fired = [t for t in webhook.texts if "database unreachable" in t and "resolved" not in t]
    assert fired, webhook.texts
    assert not [t for t in webhook.texts if "dead" in t], webhook.texts
    assert all("T0K3N" not in t and "secret" not in t for t in webhook.texts)


# --- worker connections killed on the server -------------------------------------------------


def test_server_side_kills_of_worker_connections_lose_and_hold_no_job(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    daemons: Any,
    tmp_path: Path,
) -> None:
    total = 2000
    record = tmp_path / "record.csv"
    daemon: Daemon = daemons(private_db_url, pools={QUEUE: POOL})
    daemon.start().wait_ready()
    started = time.monotonic()
    ids = enqueue_records(private_db_url, total, record, seconds=0.01)  # ~5 s of work

    kills = 0
    killed_in: Counter[str] = Counter()  # what the killed connection was doing
    master = psutil.Process(daemon.pid)
    admin = private_mariadb.admin_connection()
    try:
        stop_at = time.monotonic() + 5.0
        while time.monotonic() < stop_at and count_lines(record) < total:
            # Every session of forkq's user but the master's is a worker's (children also
            # hold the master's socket, inherited across the fork: it is left alone).
            masters = server_ports(master, private_mariadb.port)
            workers = [
                c
                for c in private_mariadb.connections(conn=admin)
                if client_port(c) is not None and client_port(c) not in masters
            ]
            busy = [c for c in workers if statement_kind(c) != "idle"]
            for victim in busy or random.sample(workers, min(1, len(workers))):
                if private_mariadb.kill_connection(victim["ID"], admin):
                    kills += 1
                    killed_in[statement_kind(victim)] += 1
            time.sleep(0.05)
    finally:
        admin.close()
    killing = time.monotonic() - started
    progress_after_kills = count_lines(record)

    wait_until(
        lambda: drained(private_mariadb),
        timeout=120,
        interval=0.2,
        message="every job done (forkq_jobs empty) after the connection kills",
    )
    elapsed = time.monotonic() - started
    runs = record_ids(record)
    counted = Counter(runs)
    lost = set(ids) - set(counted)
    report_figures(
        "KILL worker connections",
        jobs=total,
        faults=kills,
        killed_while=dict(killed_in),
        killing_seconds=round(killing, 1),
        runs_while_killing=progress_after_kills,
        lost=len(lost),
        duplicates=len(runs) - len(counted),
        seconds=round(elapsed, 1),
        lease_reaps=len([e for e in daemon.events(events.CHORES_DONE) if e.get("reaped")]),
        child_crashes=len(daemon.events(events.CHILD_CRASHED)),
    )
    assert kills >= 10, f"only {kills} connections were killed: the test did not test"
    assert not lost, f"{len(lost)} jobs never ran: {sorted(lost)[:20]}"
    assert daemon.alive(), daemon.describe()


# --- a restart under the caller's own transaction ---------------------------------------------


def test_restart_under_an_open_transactional_enqueue_fails_the_commit_and_leaves_no_job(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
) -> None:
    queue = Queue(private_db_url)
    queue.enqueue("t.noop", {"warm": True}, queue=QUEUE)  # the producer's connection is open
    private_mariadb.empty_tables()

    conn = mysql_connect(private_db_url, autocommit=False)
    try:
        conn.begin()
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1")
        job_id = queue.enqueue("t.noop", {"order": 42}, queue=QUEUE, connection=conn)
        assert job_id > 0
        private_mariadb.kill9()
        private_mariadb.start()
        with pytest.raises(DRIVER_ERRORS.MySQLError):
            conn.commit()
    finally:
        conn.close()

    assert job_counts(private_mariadb) == {}, (
        "the job outlived the transaction that never committed"
    )

    # A fresh producer works at once; one whose connection died with the server reports
    # the loss as forkq's ConnectionLost (never a driver error) and works on the next call.
    fresh = Queue(private_db_url)
    try:
        fresh_id = fresh.enqueue("t.noop", {"after": "restart"}, queue=QUEUE)
    finally:
        fresh.close()
    try:
        old_id = queue.enqueue("t.noop", {"after": "restart", "old": True}, queue=QUEUE)
    except ConnectionLost:
        old_id = queue.enqueue("t.noop", {"after": "restart", "old": True}, queue=QUEUE)
    finally:
        queue.close()
    rows = private_mariadb.admin(
        f"SELECT id, payload FROM `{private_mariadb.database}`.forkq_jobs ORDER BY id"
    )
    assert [r[0] for r in rows] == [fresh_id, old_id]
    assert json.loads(rows[0][1]) == {"after": "restart"}


# --- a deadlock that outlasts the store's retries ---------------------------------------------


def test_deadlocks_past_the_store_retries_back_off_instead_of_crashing_the_worker(
    private_db_url: str,  # noqa: F811
) -> None:
    """Seen for real in the crash test: after a restart, claims deadlock with acks more
    than TRANSIENT_RETRIES times in a row and the child died. Made certain here: the
    driver reports deadlock 1213 on every claim until the fault is lifted."""
    ran: list[int] = []
    registry.handler("faults.deadlock_noop", queue=QUEUE)(lambda payload, job: ran.append(job.id))
    store = open_store(private_db_url)
    queue = Queue(store=store)
    job_id = queue.enqueue("faults.deadlock_noop", {}, queue=QUEUE)
    fault = {"left": TRANSIENT_RETRIES}
    real_fetchall = store._fetchall

    def deadlocking(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        if name == "claim_select" and fault["left"] > 0:
            fault["left"] -= 1
            with store._errors():  # the store's own translation of the driver's error
                raise DRIVER_ERRORS.OperationalError(
                    1213, "Deadlock found when trying to get lock; try restarting transaction"
                )
        return real_fetchall(name, params)

    store._fetchall = deadlocking  # type: ignore[method-assign]
    config = Config(database=parse_database_url(private_db_url), pools=(PoolConfig(name=QUEUE),))
    worker = Worker(store, config, [QUEUE], "faults:1:deadlock")
    worker.sleep = lambda seconds: None  # type: ignore[method-assign]  # back-off without waiting
    try:
        assert worker.safely(worker.work_once) == 0  # backs off; the child lives on
        assert fault["left"] == 0
        assert worker.safely(worker.work_once) == 1  # the fault is over: the job runs
        assert ran == [job_id]
    finally:
        store.close()


# --- a database that stops answering (a partition), not one that refuses ---------------------


def child_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_silent_database_delays_neither_overtime_kills_nor_shutdown(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    partition: Partition,
    daemons: Any,
) -> None:
    timeout, grace, term_to_kill, one_db_timeout = 2.0, 3.0, 2.0, MASTER_DB_TIMEOUT
    url = private_db_url.replace(f":{private_mariadb.port}/", f":{partition.port}/")
    daemon: Daemon = daemons(
        url,
        pools={QUEUE: {"workers": 1, "timeout": timeout}},
        supervisor={"shutdown_timeout": 3},
    )
    daemon.start().wait_ready()
    queue = Queue(private_db_url)
    job_id = queue.enqueue("t.hang", {}, queue=QUEUE, max_attempts=1)  # ignores the soft timeout
    queue.close()
    busy = wait_until(
        lambda: daemon.running(job_id),
        timeout=10,
        message="the job running",
    )
    started = time.monotonic()
    partition.cut()  # the database goes silent: no refusal, no reset, nothing
    # Overtime is decided from local state: SIGTERM at timeout + grace, SIGKILL 2 s later;
    # one database timeout of slack for a call the master was already waiting in.
    deadline = timeout + grace + term_to_kill + one_db_timeout + 1.0
    wait_until(
        lambda: child_gone(busy[0]),
        timeout=deadline,
        interval=0.05,
        message=f"the overtime child killed within {deadline:g}s ({daemon.describe()})",
    )
    report_figures("silent database", overtime_kill_after=round(time.monotonic() - started, 1))

    partition.heal()  # the master records the kill once it can
    wait_until(
        lambda: job_counts(private_mariadb) == {"dead": 1},
        timeout=20,
        message="the killed job recorded dead",
    )
    partition.cut()
    stopping = time.monotonic()
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait_exit(3 + one_db_timeout + 4.0) == 0
    report_figures("silent database", sigterm_exit_after=round(time.monotonic() - stopping, 1))


def test_a_stopped_database_server_holds_back_neither_a_kill_nor_a_stop(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    daemons: Any,
) -> None:
    """SIGSTOP the server itself (connections open, nothing answers): the master's own
    queries give up after MASTER_DB_TIMEOUT and the slow work runs in the tick process,
    so an overtime kill, a SIGTERM and a SIGQUIT are each acted on within about a second."""
    timeout, grace, term_to_kill, slack = 2.0, 3.0, 2.0, 1.0
    server_pid = private_mariadb.pid
    assert server_pid is not None

    def hang_one(daemon: Daemon) -> int:
        daemon.start().wait_ready()
        queue = Queue(private_db_url)
        job_id = queue.enqueue("t.hang", {}, queue=QUEUE, max_attempts=1)
        queue.close()
        [busy] = wait_until(
            lambda: daemon.running(job_id),
            timeout=10,
            message="the job running",
        )
        return busy

    config = {
        "pools": {QUEUE: {"workers": 1, "timeout": timeout}},
        "supervisor": {"shutdown_timeout": 30, "check_interval": 1},
    }
    first: Daemon = daemons(private_db_url, **config)
    busy = hang_one(first)
    stopped = time.monotonic()
    os.kill(server_pid, signal.SIGSTOP)
    try:
        deadline = timeout + grace + term_to_kill + MASTER_DB_TIMEOUT + slack
        wait_until(
            lambda: child_gone(busy),
            timeout=deadline,
            interval=0.05,
            message=f"the overtime child killed within {deadline:g}s ({first.describe()})",
        )
        killed_after = time.monotonic() - stopped
        time.sleep(2 * MASTER_DB_TIMEOUT)  # the master is back to polling the silent server
        sent = time.time()
        first.send_signal(signal.SIGTERM)
        [stopping] = wait_until(
            lambda: first.events(events.MASTER_STOPPING), timeout=5, message="SIGTERM acted on"
        )
        acted_after = _event_time(stopping) - sent
        assert acted_after < MASTER_DB_TIMEOUT + slack, acted_after
    finally:
        os.kill(server_pid, signal.SIGCONT)
    first.kill_all()

    second: Daemon = daemons(private_db_url, **config)
    busy = hang_one(second)
    os.kill(server_pid, signal.SIGSTOP)
    try:
        time.sleep(2 * MASTER_DB_TIMEOUT)
        sent = time.monotonic()
        second.send_signal(signal.SIGQUIT)
        assert second.wait_exit(MASTER_DB_TIMEOUT + 2 * slack) == 0
        quit_after = time.monotonic() - sent
        assert child_gone(busy)
    finally:
        os.kill(server_pid, signal.SIGCONT)
    report_figures(
        "stopped server",
        overtime_kill_after=round(killed_after, 2),
        sigterm_acted_after=round(acted_after, 2),
        sigquit_exit_after=round(quit_after, 2),
    )


def _event_time(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()
