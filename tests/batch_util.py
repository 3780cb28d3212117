"""What the batch tests share: a handler module whose callback records each run, and the
server's deadlock and lock-wait counters (reported by the tests, never hidden)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from daemon_util import Daemon
from util import backend_of, mysql_connect

BATCH_HANDLERS = '''
import os
from supervisor import handler


@handler("b.callback")
def callback(payload, job):
    """One line per run: event, batch id, this callback job's id, counts."""
    line = (f"{payload['event']},{payload['batch_id']},{job.id},{payload['done']},"
            f"{payload['dead']}\\n").encode()
    fd = os.open(payload["payload"]["file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
'''


def with_batch_handlers(daemon: Daemon) -> Daemon:
    daemon.write_module("batchhandlers", BATCH_HANDLERS)
    handlers = [*daemon.supervisor["handlers"], "batchhandlers"]
    daemon.write_config(supervisor={"handlers": handlers})
    return daemon


def callback_runs(path: Path) -> list[tuple[str, int, int, int, int]]:
    """(event, batch id, callback job id, done, dead) of each callback run."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        event, batch, job, done, dead = line.split(",")
        out.append((event, int(batch), int(job), int(done), int(dead)))
    return out


def lock_counters(db_url: str) -> dict[str, int]:
    """The server's Innodb_deadlocks and Innodb_row_lock_waits (empty on SQLite). Server-wide:
    a delta counts every session of the shared server, an upper bound of ours."""
    if backend_of(db_url) != "mysql":
        return {}
    conn: Any = mysql_connect(db_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SHOW GLOBAL STATUS WHERE Variable_name IN"
                " ('Innodb_deadlocks', 'Innodb_row_lock_waits')"
            )
            return {str(name): int(value) for name, value in cursor.fetchall()}
    finally:
        conn.close()


def report_locks(db_url: str, before: dict[str, int], what: str) -> dict[str, int]:
    """Print (pytest -s shows it; the junit report keeps it) the counters' deltas."""
    after = lock_counters(db_url)
    delta = {name: after[name] - before.get(name, 0) for name in after}
    print(f"\n{what}: server-wide lock counters during the run: {delta or 'n/a (SQLite)'}")
    return delta
