"""Helpers shared by the test suites: deadlines instead of sleeps, and raw database access.

Raw access (a driver connection, the `mariadb` client) is for checking what the store
wrote and for arranging states the API cannot reach (a heartbeat two days old); tests
drive forkq itself through its public API.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pymysql
import pytest

from supervisor.dburl import DatabaseURL, parse_database_url

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]
SCHEMA_SQL = REPO_ROOT / "schema.sql"
STORE_DIR = REPO_ROOT / "supervisor" / "store"
SQL_DIR = STORE_DIR / "sql"  # the named queries and the DDL of both backends
SQLITE_SCHEMA_SQL = SQL_DIR / "sqlite_schema.sql"

MYSQL_URL_ENV = "FORKQ_TEST_MYSQL_URL"
DEFAULT_MYSQL_URL = "mysql://root@127.0.0.1:3306/forkq_test"


# --- waiting -------------------------------------------------------------------------------


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str = "condition",
) -> T:
    """Poll `predicate` until it returns something truthy and return that value.

    Raises AssertionError naming `message` (and the last value seen) once `timeout`
    seconds have passed on the monotonic clock. The predicate runs at least once, and
    once more after the deadline, so a slow machine cannot fail a condition that holds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            value = predicate()
            if value:
                return value
            raise AssertionError(
                f"timed out after {timeout:g}s waiting for {message} (last: {value!r})"
            )
        time.sleep(interval)


def report_figures(name: str, **figures: Any) -> None:
    """Print a test's measured figures where `pytest -s` and the CI log show them."""
    print(f"\n[fault figures] {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def in_ci() -> bool:
    """True on CI, where a missing service must fail the run, never skip it."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str) -> None:
    """Skip locally; fail on CI, where a skipped test would hide a broken build (a missing
    tool such as php or libfaketime: scripts/ensure-tools.sh installs them)."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: what the tests need must be installed)", pytrace=False)
    pytest.skip(reason)


# --- URLs ------------------------------------------------------------------------------------


def backend_of(url: str) -> str:
    """'sqlite' or 'mysql'."""
    return parse_database_url(url).backend


def applied(url: str) -> str:
    """`url`, its database given forkq's schema through the product's own store."""
    from supervisor.store import open_store

    store = open_store(url)
    try:
        store.apply_schema()
    finally:
        store.close()
    return url


def sqlite_url_for(path: Path | str) -> str:
    """sqlite:////absolute/path.db for a path (made absolute)."""
    return f"sqlite:///{Path(path).resolve()}"


def with_database(url: str, database: str) -> str:
    """The same MySQL URL (user, password, host, options) naming another database."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def database_name(url: str) -> str:
    return parse_database_url(url).database


def subprocess_env(db_url: str, **extra: str) -> dict[str, str]:
    """Environment for `python -m supervisor ...` against `db_url` from a checkout.

    FORKQ_DATABASE_URL overrides any config file's URL; PYTHONPATH finds the package
    without an install; PYTHONUNBUFFERED makes its output arrive line by line.
    """
    env = dict(os.environ)
    env["FORKQ_DATABASE_URL"] = db_url
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def forkq_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m supervisor ARGS --database URL` in a subprocess, with no config file."""
    env = subprocess_env(url)
    env.pop("FORKQ_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args, "--database", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def python() -> str:
    """The interpreter running the tests (the venv's), for subprocesses."""
    return sys.executable


def free_tcp_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- processes that must not outlive the test run ----------------------------------------------

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def dies_with_us(sig: int) -> Callable[[], None] | None:
    """A `preexec_fn` for `subprocess.Popen`: the child gets `sig` when this process dies.

    A fixture's teardown kills what its test started, but only if pytest lives to run
    it: a CI timeout's SIGKILL, pytest-timeout's `os._exit`, a Ctrl-\\ end pytest and leave
    a daemon, a mariadbd or a web server running for hours. So every long-running process
    the tests start is tied to this one with Linux's parent-death signal (PR_SET_PDEATHSIG),
    `sig` chosen per program: one it ends on promptly, its own children with it.

    Its hazards, and what is done about them:
    - the kernel sends it when the *thread* that forked dies, not the process: a child
      started from a thread that ends would be signalled then. So only the main thread
      may start one (an AssertionError otherwise, rather than a surprise kill later);
    - this process may die between the fork and the prctl: the child then has a new
      parent and would never be signalled, so it checks its parent after the prctl and
      exits rather than run the program;
    - the signal is cleared when the child changes its credentials (setuid, or the exec
      of a set-user-ID program): `mariadbd --user=root` run as root changes nothing;
    - code between fork and exec must not take a lock another thread may hold: prctl is
      looked up here, in the parent (libc is loaded: no `find_library`, which runs
      ldconfig), and the child only calls it and `getppid`.

    None where there is no prctl (not Linux): `preexec_fn=None` is Popen's default.
    """
    assert threading.current_thread() is threading.main_thread(), (
        "start long-running processes from the main thread: the parent-death signal is "
        "sent when the forking thread ends"
    )
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None:
        return None
    parent = os.getpid()

    def tie() -> None:
        if prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:  # Popen raises SubprocessError
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:  # the parent died before the prctl: nobody to outlive
            os._exit(1)

    return tie


# --- schema text -------------------------------------------------------------------------------


_CREATE_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS\s+`?(\w+)`?\s*\((.*?)\n\)", re.S | re.I)
_NOT_A_COLUMN = ("PRIMARY", "UNIQUE", "KEY", "INDEX", "CONSTRAINT", "FOREIGN", "CHECK", "FULLTEXT")


def strip_sql_comments(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.strip().startswith("--"))


def ddl_columns(text: str) -> dict[str, dict[str, str]]:
    """{table: {column: its definition line}} from CREATE TABLE statements, in file order."""
    tables: dict[str, dict[str, str]] = {}
    for match in _CREATE_TABLE.finditer(strip_sql_comments(text)):
        columns: dict[str, str] = {}
        for raw in match.group(2).splitlines():
            line = raw.strip().rstrip(",")
            if not line or line.split()[0].upper() in _NOT_A_COLUMN:
                continue
            columns[line.split()[0].strip("`")] = line
        tables[match.group(1)] = columns
    return tables


def schema_tables() -> list[str]:
    """forkq's tables, as schema.sql declares them."""
    return list(ddl_columns(SCHEMA_SQL.read_text(encoding="utf-8")))


# Emptied before each test; forkq_schema keeps the applied version.
DATA_TABLES = tuple(t for t in schema_tables() if t != "forkq_schema")


# --- raw connections -----------------------------------------------------------------------


def mysql_connect(url: str | DatabaseURL, *, database: bool = True, **options: Any) -> Any:
    """A PyMySQL connection for a MySQL URL (autocommit on unless `options` say otherwise)."""
    parsed = parse_database_url(url) if isinstance(url, str) else url
    kwargs: dict[str, Any] = {
        "host": parsed.host,
        "port": parsed.port,
        "user": parsed.user,
        "password": parsed.password,
        "database": parsed.database if database else None,
        "unix_socket": parsed.unix_socket or None,
        "charset": "utf8mb4",
        "autocommit": True,
        "connect_timeout": 5,
        "read_timeout": 60,
        "write_timeout": 60,
    }
    kwargs.update(options)
    return pymysql.connect(**kwargs)


def native_connection(url: str, **options: Any) -> Any:
    """The caller's own driver connection for transactional enqueue: autocommit off.

    PyMySQL for MySQL URLs, sqlite3 (its default deferred transactions) for SQLite.
    """
    parsed = parse_database_url(url)
    if parsed.backend == "sqlite":
        conn = sqlite3.connect(parsed.path, timeout=30)
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn
    return mysql_connect(url, **{"autocommit": False, **options})


@contextmanager
def connected(url: str) -> Iterator[Any]:
    conn = native_connection(url)
    try:
        yield conn
    finally:
        conn.close()


def sql(url: str, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run one statement (`?` placeholders) on a fresh connection, commit, return its rows."""
    with connected(url) as conn:
        if backend_of(url) == "mysql":
            with conn.cursor() as cursor:
                if params:  # PyMySQL formats with %: only then do literal % need doubling
                    cursor.execute(statement.replace("%", "%%").replace("?", "%s"), tuple(params))
                else:
                    cursor.execute(statement)
                rows = list(cursor.fetchall())
        else:
            rows = list(conn.execute(statement, tuple(params)).fetchall())
        conn.commit()
        return rows


def count_rows(url: str, table: str, where: str = "1 = 1", params: Sequence[Any] = ()) -> int:
    assert re.fullmatch(r"forkq_\w+", table), table
    return int(sql(url, f"SELECT COUNT(*) FROM {table} WHERE {where}", params)[0][0])


def backdate(url: str, table: str, column: str, key: str, value: Any, seconds: float) -> None:
    """Move one row's time column `seconds` into the past (rows as if written earlier)."""
    assert re.fullmatch(r"forkq_\w+", table) and re.fullmatch(r"\w+", column + key)
    if backend_of(url) == "mysql":
        shift = f"{column} - INTERVAL {int(seconds * 1_000_000)} MICROSECOND"
    else:
        shift = f"{column} - {float(seconds)!r}"
    sql(url, f"UPDATE {table} SET {column} = {shift} WHERE {key} = ?", (value,))


def empty_tables(url: str) -> None:
    """Delete every row of forkq's data tables (the schema version stays)."""
    with connected(url) as conn:
        if backend_of(url) == "mysql":
            with conn.cursor() as cursor:
                for table in DATA_TABLES:
                    cursor.execute(f"DELETE FROM {table}")
        else:
            for table in DATA_TABLES:
                conn.execute(f"DELETE FROM {table}")
        conn.commit()


def create_database(url: str) -> None:
    """Create the database a MySQL URL names, dropping any leftover of the same name."""
    _on_server(
        url,
        "DROP DATABASE IF EXISTS `{name}`",
        "CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    )


def drop_database(url: str) -> None:
    _on_server(url, "DROP DATABASE IF EXISTS `{name}`")


def _on_server(url: str, *statements: str) -> None:
    """Run statements about the URL's database (`{name}`) on a connection to no database."""
    name = database_name(url)
    assert re.fullmatch(r"\w+", name), name
    conn = mysql_connect(url, database=False)
    try:
        with conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement.format(name=name))
    finally:
        conn.close()


def mariadb_client() -> str | None:
    """The `mariadb` (or `mysql`) command-line client, if installed."""
    return shutil.which("mariadb") or shutil.which("mysql")


def run_mariadb_client(url: str, statements: str) -> subprocess.CompletedProcess[str]:
    """Run SQL through the command-line client over TCP, as a non-Python program would.

    The password travels in MYSQL_PWD, never on the command line.
    """
    client = mariadb_client()
    assert client, "no mariadb/mysql command-line client installed"
    parsed = parse_database_url(url)
    command = [client, "--no-defaults", "--batch", "--skip-column-names"]
    if parsed.unix_socket:
        command += [f"--socket={parsed.unix_socket}"]
    else:
        command += ["--protocol=TCP", f"--host={parsed.host}", f"--port={parsed.port}"]
    command += [f"--user={parsed.user}", f"--database={parsed.database}"]
    env = dict(os.environ, MYSQL_PWD=parsed.password)
    result = subprocess.run(
        command, input=statements, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, f"mariadb client failed: {result.stderr.strip()}"
    return result


def insert_raw(db_url: str, handler: str, payload: Any, queue: str) -> int:
    """One row as a non-Python producer would write it (the documented one-line INSERT)."""
    with connected(db_url) as conn:
        if backend_of(db_url) == "mysql":
            with conn.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO forkq_jobs (queue, handler, payload) VALUES (%s, %s, %s)",
                    (queue, handler, payload),
                )
                job_id = int(cursor.lastrowid)
        else:
            job_id = int(
                conn.execute(
                    "INSERT INTO forkq_jobs (queue, handler, payload) VALUES (?, ?, ?)",
                    (queue, handler, payload),
                ).lastrowid
            )
        conn.commit()
    return job_id


def insert_raw_ahead(db_url: str, queue: str, seconds: float) -> int:
    """A raw INSERT with a run_at `seconds` ahead on the database clock, as another
    program would write it: status takes its default, `ready`."""
    with connected(db_url) as conn:
        if backend_of(db_url) == "mysql":
            with conn.cursor() as cursor:
                cursor.execute(
                    "INSERT INTO forkq_jobs (queue, handler, payload, run_at)"
                    " VALUES (%s, 't.noop', '{}', NOW(6) + INTERVAL %s MICROSECOND)",
                    (queue, int(seconds * 1_000_000)),
                )
                job_id = int(cursor.lastrowid)
        else:
            job_id = int(
                conn.execute(
                    "INSERT INTO forkq_jobs (queue, handler, payload, run_at)"
                    " VALUES (?, 't.noop', '{}', (julianday('now') - 2440587.5) * 86400.0 + ?)",
                    (queue, seconds),
                ).lastrowid
            )
        conn.commit()
    return job_id
