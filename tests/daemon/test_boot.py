"""`forkq run` at boot, before any fork: a database that is not ready for it.

A database without forkq's tables or with an older schema is an operator's step (one
line naming `forkq schema apply`, exit 78, so systemd does not restart-loop); a database
that is briefly locked or not answering yet is waited for, never a crash.
"""

from __future__ import annotations

import signal
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_util import (
    failed,
    forkq,
    ok,
    workdir_fixture,  # noqa: F401  (the `workdir` fixture)
)
from daemon_util import Daemon, record_ids
from util import sql, wait_until

from supervisor import Queue, events
from supervisor.dburl import parse_database_url
from supervisor.store import SCHEMA_VERSION


def test_run_on_a_database_without_tables_names_schema_apply_and_exits_78(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'empty.db'}"
    result = forkq(workdir, "run", "-c", "forkq.toml", database=url)
    assert "forkq schema apply" in failed(result, 78)
    assert events.MASTER_CRASHED not in result.stdout  # an operator's step, not a defect


def test_run_on_an_older_schema_names_schema_apply_and_exits_78(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'old.db'}"
    ok(forkq(workdir, "schema", "apply", database=url))
    # What a database left at the previous release looks like to this one.
    sql(url, "UPDATE forkq_schema SET version = ?", (SCHEMA_VERSION - 1,))
    result = forkq(workdir, "run", "-c", "forkq.toml", database=url)
    line = failed(result, 78)
    assert "forkq schema apply" in line and f"version {SCHEMA_VERSION - 1}" in line
    assert events.MASTER_CRASHED not in result.stdout


# --- a database not there yet is waited for (issue 21.16) -----------------------------------


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """Daemons on the URL each test names (SQLite only here), killed at teardown."""
    made: list[Daemon] = []

    def make(db_url: str, **kwargs: Any) -> Daemon:
        made.append(Daemon(tmp_path, db_url, name=f"daemon{len(made)}", **kwargs))
        return made[-1]

    yield make
    for daemon in made:
        daemon.kill_all()


def test_run_waits_for_a_sqlite_file_another_connection_holds_locked(
    daemons: Callable[..., Daemon], sqlite_db_url: str, tmp_path: Path
) -> None:
    """The application holds a write transaction open while `forkq run` starts: the master
    waits (one line a try) instead of crashing with "database is locked", then runs jobs."""
    record = tmp_path / "record.txt"
    job_id = Queue(sqlite_db_url).enqueue("t.record", {"file": str(record)}, queue="work")
    holder = sqlite3.connect(parse_database_url(sqlite_db_url).path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        daemon = daemons(db_url=sqlite_db_url).start()
        daemon.wait_event(events.DB_CONTENTION)  # it tried, and said it waits
        assert daemon.alive(), daemon.describe()
        holder.execute("COMMIT")
    finally:
        holder.close()
    daemon.wait_ready()
    wait_until(lambda: record_ids(record) == [job_id], timeout=20, message="the job ran")
    assert not daemon.events(events.MASTER_CRASHED)
    assert daemon.stop() == 0, daemon.describe()


def test_a_stop_during_the_wait_for_the_database_ends_the_master_at_once(
    daemons: Callable[..., Daemon], sqlite_db_url: str
) -> None:
    holder = sqlite3.connect(parse_database_url(sqlite_db_url).path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        daemon = daemons(db_url=sqlite_db_url).start()
        daemon.wait_event(events.DB_CONTENTION)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait_exit(timeout=10) == 0, daemon.describe()
    finally:
        holder.close()
    assert not daemon.events(events.MASTER_STARTED)
