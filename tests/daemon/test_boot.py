"""`forkq run` at boot, before any fork: a database that is not ready for it.

A database without forkq's tables or with an older schema is an operator's step (one
line naming `forkq schema apply`, exit 78, so systemd does not restart-loop); a database
that is briefly locked or not answering yet is waited for, never a crash.
"""

from __future__ import annotations

import json
import signal
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from cli_util import (
    failed,
    forkq,
    ok,
    workdir_fixture,  # noqa: F401  (the `workdir` fixture)
)
from daemon_util import Daemon, record_ids, render_config
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


def refused_boot(workdir: Path, url: str, secret: str | None = None) -> str:
    """`forkq run` on a database that answers and refuses it: one line on stderr, exit 1
    (systemd tries again), and `master_refused` in the log in one line, never a traceback
    under `master_crashed` (a password or a grant is the operator's to fix, not a defect)."""
    result = forkq(workdir, "run", "-c", "forkq.toml", database=url)
    line = failed(result, 1)
    assert events.MASTER_CRASHED not in result.stdout, result.stdout
    [refused] = [
        e for e in map(json.loads, result.stdout.splitlines()) if e["event"] == "master_refused"
    ]
    assert refused["error"] in line and "Traceback" not in result.stdout
    assert secret is None or secret not in result.stdout + result.stderr
    return line


def test_run_with_a_wrong_password_is_refused_in_one_line(workdir: Path, mysql_db_url: str) -> None:
    parsed = urlsplit(mysql_db_url)
    wrong = parsed._replace(netloc=f"forkq:not-the-pw-42@{parsed.hostname}:{parsed.port}")
    assert "Access denied" in refused_boot(workdir, urlunsplit(wrong), "not-the-pw-42")


def test_run_on_a_database_that_does_not_exist_is_refused_in_one_line(
    workdir: Path, mysql_db_url: str
) -> None:
    parsed = urlsplit(mysql_db_url)
    assert "Unknown database" in refused_boot(
        workdir, urlunsplit(parsed._replace(path="/no_such_db_9"))
    )


def test_run_on_a_file_that_is_not_an_sqlite_database_is_refused_in_one_line(
    workdir: Path,
) -> None:
    (workdir / "notes.db").write_text("these are my notes, not a database\n" * 200)
    assert "not a database" in refused_boot(workdir, f"sqlite:///{workdir / 'notes.db'}")


def test_run_on_a_file_sqlite_cannot_open_is_refused_not_waited_for(workdir: Path) -> None:
    # There, and never openable as a database (procfs takes no WAL beside it): it used to
    # be waited for at boot as an unreachable server, for ever.
    line = refused_boot(workdir, "sqlite:////proc/version")
    assert "cannot open the SQLite database at /proc/version" in line


def test_run_on_a_missing_file_says_there_is_no_database_there(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'typo' / 'forkq.db'}"
    line = failed(forkq(workdir, "run", "-c", "forkq.toml", database=url), 78)
    assert f"no SQLite database at {workdir / 'typo' / 'forkq.db'}" in line
    assert "forkq schema apply" in line and not (workdir / "typo").exists()


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


def test_a_reload_onto_a_database_without_forkqs_tables_is_refused(
    daemons: Callable[..., Daemon], sqlite_db_url: str, tmp_path: Path
) -> None:
    """As the boot would be: the master keeps its database and its children, and says
    why; once the schema is applied there, the same HUP moves it."""
    daemon = daemons(db_url=sqlite_db_url).start()
    daemon.wait_ready()
    children = set(daemon.pool_children("work"))
    empty = f"sqlite:///{tmp_path / 'moved.db'}"
    daemon.write_config(text=render_config(empty, daemon.pools, daemon.supervisor))
    daemon.send_signal(signal.SIGHUP)
    [refused] = daemon.wait_event(events.RELOAD_REFUSED)
    assert "forkq schema apply" in refused["error"] and "moved.db" in refused["error"]
    assert (
        set(daemon.pool_children("work")) == children
        and daemon.events(events.CONFIG_RELOADED) == []
    )
    record = tmp_path / "record.txt"
    kept = Queue(sqlite_db_url).enqueue("t.record", {"file": str(record)}, queue="work")
    wait_until(
        lambda: record_ids(record) == [kept], timeout=20, message="a job of the old database ran"
    )
    ok(forkq(tmp_path, "schema", "apply", database=empty))
    daemon.send_signal(signal.SIGHUP)
    daemon.wait_event(events.CONFIG_RELOADED)
    moved = Queue(empty).enqueue("t.record", {"file": str(record)}, queue="work")
    try:
        wait_until(lambda: record_ids(record) == [kept, moved], timeout=20, message="the new one's")
    except AssertionError as exc:  # seen once in CI, never here: say what there was
        rows = sql(empty, "SELECT id, status, attempts, locked_by, last_error FROM forkq_jobs")
        raise AssertionError(
            f"{exc}; ran {record_ids(record)}; new database {rows}; {daemon.describe()}"
        ) from None
    assert daemon.stop() == 0, daemon.describe()
