"""A daemon SIGKILLed while it finishes a parent (SPEC "Composing jobs"): the transaction
that ends the parent and releases its child dies with it, and after recovery (another
daemon on the node settles the dead worker's job, which runs again) the child is released
and runs exactly once, after the parent's last run.

The kill lands inside the finishing transaction on purpose: on MariaDB the test holds the
child's row lock, so the release waits on it (seen in information_schema) with the parent
already ended in the same uncommitted transaction; on SQLite it holds the write lock, so
the parent's end waits for it. Lock waits and deadlocks of the server are printed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_util import HANDLERS_MODULE, Daemon, count_lines, record_ids, session_processes
from util import backend_of, mysql_connect, wait_until

from supervisor import Queue
from supervisor.dburl import parse_database_url

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

POOL = {"work": {"workers": 1, "timeout": 30}}
SUPERVISOR = {"chores_lease": 2, "process_stale_after": 5, "handlers": [HANDLERS_MODULE, "gated"]}
GATED_SOURCE = """\
import os
import time

from supervisor import handler


@handler("t.gated")
def gated(payload, job):
    \"\"\"Say it started, wait for payload["gate"] to exist, then record as t.record does.\"\"\"
    start = time.time()
    open(payload["started"], "a").close()
    while not os.path.exists(payload["gate"]):
        time.sleep(0.01)
    line = f"{job.id},{os.getpid()},{start:.6f},{time.time():.6f}\\n".encode()
    fd = os.open(payload["file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
"""


def daemon(daemons: Callable[..., Daemon], db_url: str, name: str) -> Daemon:
    made = daemons(db_url, name=name, pools=POOL, supervisor=SUPERVISOR)
    made.write_module("gated", GATED_SOURCE)
    return made


def kill_everything(daemon: Daemon) -> None:
    assert daemon.sid is not None
    for pid in {p.pid for p in session_processes(daemon.sid)} | {daemon.pid}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    daemon.kill_all()


@contextlib.contextmanager
def holding_child(db_url: str, child: int) -> Iterator[Callable[[], bool]]:
    """Hold a lock the parent's end must wait for; yields "is a writer waiting on it?"."""
    if backend_of(db_url) == "mysql":
        conn = mysql_connect(db_url, autocommit=False)
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT id FROM forkq_jobs WHERE id = %s FOR UPDATE", (child,))

            def waiting() -> bool:
                with mysql_connect(db_url) as other, other.cursor() as cursor:
                    cursor.execute(
                        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t"
                        " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
                        " WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
                    )
                    return int(cursor.fetchone()[0]) > 0

            yield waiting
        finally:
            conn.rollback()
            conn.close()
        return
    lite = sqlite3.connect(parse_database_url(db_url).path, isolation_level=None, timeout=30)
    try:
        lite.execute("BEGIN IMMEDIATE")
        yield lambda: True
    finally:
        lite.execute("ROLLBACK")
        lite.close()


def server_counters(db_url: str) -> dict[str, int]:
    if backend_of(db_url) != "mysql":
        return {}
    with mysql_connect(db_url) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_deadlocks', 'Innodb_row_lock_waits')"
        )
        return {str(name): int(value) for name, value in cursor.fetchall()}


def test_a_daemon_killed_while_finishing_a_parent_releases_the_child_once_after_recovery(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    parents, children = tmp_path / "parent.rec", tmp_path / "child.rec"
    started, gate = tmp_path / "started", tmp_path / "gate"
    before = server_counters(db_url)
    q = Queue(db_url)
    try:
        first = daemon(daemons, db_url, "first").start().wait_ready(timeout=120)
        payload = {"file": str(parents), "started": str(started), "gate": str(gate)}
        parent = q.enqueue("t.gated", payload, queue="work")
        child = q.enqueue("t.record", {"file": str(children)}, queue="work", depends_on=[parent])
        wait_until(started.exists, timeout=60, message="the parent started")
        with holding_child(db_url, child) as waiting:
            gate.touch()  # the parent ends now, and its end waits on the test's lock
            wait_until(lambda: count_lines(parents) == 1, timeout=30, message="the parent ran")
            wait_until(waiting, timeout=30, message="the parent's end waits on the lock")
            kill_everything(first)
        # The finishing transaction died with its daemon: nothing of it was written.
        wait_until(lambda: q.get(parent).status == "running", timeout=60)  # type: ignore[union-attr]
        assert q.get(child).status == "waiting"  # type: ignore[union-attr]
        daemon(daemons, db_url, "second").start().wait_ready(timeout=120)
        wait_until(lambda: count_lines(children) >= 1, timeout=120, message="the child ran")
        wait_until(lambda: q.get(child) is None, timeout=30, message="the child's end written")
    finally:
        q.close()
    runs: dict[str, Any] = {"parent": record_ids(parents), "child": record_ids(children)}
    after = server_counters(db_url)
    print(
        f"\n[fault figures] deps kill -9 while finishing a parent ({backend_of(db_url)}): "
        f"parent runs={len(runs['parent'])}, child runs={len(runs['child'])}, server-wide "
        f"{ {k: after[k] - before.get(k, 0) for k in after} }"
    )
    assert runs["child"] == [child]  # released once: run once
    assert runs["parent"] == [parent, parent]  # at least once: it ran again after recovery
    last_parent_end = float(parents.read_text().splitlines()[-1].split(",")[3])
    child_start = float(children.read_text().splitlines()[0].split(",")[2])
    assert child_start >= last_parent_end
