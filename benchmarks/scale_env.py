"""What the scale+ sections (benchmarks/sections/: claims, tick, wake, silent, trickle)
run against.

- `BenchMariaDB`: the tests' private server (tests/private_mariadb.py) with MariaDB's
  own defaults for the buffer pool (128 MiB) and the redo log (96 MiB), and a short
  lock wait timeout (2 s, so a blocked enqueue fails in bounded time instead of 50 s).
  Nothing heavy ever goes to the shared server: millions of rows, SIGSTOP and a crash
  all happen on this one, on its own port and data directory, started and killed here.
- `Jobs`: one forkq database under test (a database on that server, or a SQLite file),
  with a raw connection for arranging rows in bulk (INSERT ... SELECT over MariaDB's
  SEQUENCE engine, a recursive CTE on SQLite: seconds for a million rows).
- `daemon(...)`: the tests' daemon launcher (tests/daemon_util.py), configured like a
  production install (poll 50 ms, heartbeat 5 s, check tick 10 s) unless told otherwise.

The code under test is whatever `supervisor` this interpreter imports (run.py puts its
own checkout first on sys.path), and the daemons run the same checkout.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for entry in (str(REPO), str(BENCH_DIR)):
    if entry not in sys.path:
        sys.path.insert(0, entry)
if str(REPO / "tests") not in sys.path:
    sys.path.append(str(REPO / "tests"))  # the tests' launchers: private_mariadb, daemon_util

import daemon_util  # noqa: E402
import pymysql  # noqa: E402
from private_mariadb import PrivateMariaDB, binaries_missing  # noqa: E402

from supervisor import Queue  # noqa: E402
from supervisor.store import open_store  # noqa: E402

BUFFER_POOL = "128M"  # MariaDB's default innodb_buffer_pool_size
REDO_LOG = "96M"  # MariaDB 10.11's default innodb_log_file_size
LOCK_WAIT_TIMEOUT = 2  # seconds (default 50): a blocked enqueue fails fast instead
USER, PASSWORD = "forkq", "secret"
SCHEDULED_DELAY = 86400.0  # "scheduled" jobs: run_at a day ahead
# The daemon as installed: the tests' launcher defaults to fast test timers.
PRODUCTION_TIMERS = {"check_interval": 10.0, "heartbeat_interval": 5.0, "poll_interval": 0.05}


class ServerDied(RuntimeError):
    """The private server is gone (crashed, killed): the message quotes its error log."""


class BenchMariaDB(PrivateMariaDB):
    """A private mariadbd with the defaults a new user gets (the tests use 64 MiB)."""

    def _server_options(self) -> list[str]:
        options = []
        for option in super()._server_options():
            if option.startswith("--innodb-buffer-pool-size="):
                option = f"--innodb-buffer-pool-size={BUFFER_POOL}"
            elif option.startswith("--innodb-log-file-size="):
                option = f"--innodb-log-file-size={REDO_LOG}"
            options.append(option)
        return [*options, f"--innodb-lock-wait-timeout={LOCK_WAIT_TIMEOUT}"]

    def fatal_lines(self) -> list[str]:
        """The error log's lines that say the server aborted."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        marks = ("[FATAL]", "got signal", "Assertion")
        return [line.strip() for line in text.splitlines() if any(m in line for m in marks)]

    def trouble(self) -> str | None:
        """Why the server is not usable (dead, or aborted), or None."""
        fatal = self.fatal_lines()
        if fatal:
            return "; ".join(fatal[:2])[:400]
        if not self.alive():
            return f"mariadbd exited ({self.proc.returncode if self.proc else None})"
        return None

    def check(self) -> None:
        problem = self.trouble()
        if problem:
            raise ServerDied(f"private mariadbd died: {problem}")

    def freeze(self) -> None:
        """SIGSTOP: the server keeps its sockets but answers nothing (a hung database)."""
        if self.pid:
            os.kill(self.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)

    def describe(self) -> str:
        version, pool, log, wait = self.admin(
            "SELECT VERSION(), @@innodb_buffer_pool_size, @@innodb_log_file_size,"
            " @@innodb_lock_wait_timeout"
        )[0]
        return (
            f"{version} on port {self.port}, own datadir; innodb_buffer_pool_size"
            f" {int(pool) // 2**20} MiB (the default), innodb_log_file_size"
            f" {int(log) // 2**20} MiB (the default), innodb_lock_wait_timeout {wait} s"
        )

    def index_reads(self, database: str) -> dict[str, int]:
        """Rows read per index of forkq_jobs since start (userstat's INDEX_STATISTICS)."""
        rows = self.admin(
            "SELECT INDEX_NAME, ROWS_READ FROM information_schema.INDEX_STATISTICS"
            " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'forkq_jobs'",
            (database,),
        )
        return {f"index {name}": int(n) for name, n in rows}

    def global_status(self, like: str) -> dict[str, int]:
        rows = self.admin(f"SHOW GLOBAL STATUS LIKE '{like}'")
        return {name: int(value) for name, value in rows if str(value).lstrip("-").isdigit()}


_server: BenchMariaDB | None = None


def server() -> BenchMariaDB:
    """The run's private server, started on first use (again after a crash)."""
    global _server
    if _server is not None and _server.trouble():
        _server.destroy()
        _server = None
    if _server is None:
        missing = binaries_missing()
        if missing:
            raise RuntimeError(f"no private MariaDB here: {missing}")
        candidate = BenchMariaDB()
        try:
            candidate.start()
            candidate.admin("SET GLOBAL userstat = 1")  # INDEX_STATISTICS: reads per index
        except BaseException:
            candidate.destroy()
            raise
        _server = candidate
    return _server


def close_server() -> None:
    """Kill the private server (SIGCONT first, in case it was stopped) and remove its files."""
    global _server
    if _server is not None:
        with contextlib.suppress(Exception):
            _server.thaw()
        _server.destroy()
        _server = None


# --- one forkq database under test ----------------------------------------------------------


class Jobs:
    """A forkq database for one section: its URL, and raw SQL for arranging rows."""

    backend: str
    url: str
    srv: BenchMariaDB | None = None

    def sql(self, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def fill(self, kind: str, first: int, last: int, queue: str = "s", queues: int = 1) -> None:
        """Rows first..last (1-based sequence numbers) of one kind, in bulk:

        - `scheduled`: run_at a day ahead (+ seq µs, all distinct), with the status
          forkq's own enqueue gives such a job (probed, so the rows are what `enqueue`
          with delay=86400 writes, be it `ready` or `scheduled`);
        - `finished`: done, one in ten dead, finished within the last day.

        With `queues` > 1 the rows are spread over queue0..queueN-1.
        """
        raise NotImplementedError

    def drop(self) -> None: ...

    def count(self, where: str = "1 = 1") -> int:
        return int(self.sql(f"SELECT COUNT(*) FROM forkq_jobs WHERE {where}")[0][0])

    def scheduled_status(self, queue: str = "s") -> str:
        """The status `Queue.enqueue(delay=86400)` writes (the probe job is deleted)."""
        q = Queue(self.url)
        try:
            job_id = q.enqueue("t.noop", {}, queue=queue, delay=SCHEDULED_DELAY)
        finally:
            q.close()
        param = "%s" if self.backend == "mariadb" else "?"
        status = str(self.sql(f"SELECT status FROM forkq_jobs WHERE id = {param}", (job_id,))[0][0])
        self.sql(f"DELETE FROM forkq_jobs WHERE id = {param}", (job_id,))
        return status

    def settle(self, seconds: float = 15.0) -> None:
        """Let a bulk insert's dirty pages go out before timing (bounded)."""


class MariaJobs(Jobs):
    backend = "mariadb"

    def __init__(self, srv: BenchMariaDB, name: str) -> None:
        self.srv = srv
        self.name = name
        srv.admin(f"DROP DATABASE IF EXISTS `{name}`")
        srv.create_user(USER, PASSWORD, name)
        self.url = srv.url_for(USER, PASSWORD, name)
        store = open_store(self.url)
        try:
            store.apply_schema()
        finally:
            store.close()
        self.conn = srv.admin_connection()
        self.conn._read_timeout = 900  # a bulk insert of a million rows, on a busy machine
        self.conn._write_timeout = 900
        self.sql(f"USE `{name}`")

    def sql(self, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
        try:
            with self.conn.cursor() as cur:
                cur.execute(statement, params or None)
                return list(cur.fetchall())
        except pymysql.err.OperationalError as exc:
            if self.srv is not None and self.srv.trouble():
                raise ServerDied(f"private mariadbd died: {self.srv.trouble()}") from exc
            raise

    def fill(self, kind: str, first: int, last: int, queue: str = "s", queues: int = 1) -> None:
        name = "%s" if queues == 1 else f"CONCAT(%s, MOD(seq, {queues}))"
        if kind == "scheduled":
            status = self.scheduled_status(queue if queues == 1 else f"{queue}0")
            columns = "queue, handler, payload, status, run_at"
            values = (
                f"{name}, 't.noop', '{{}}', %s, NOW(6) + INTERVAL (86400000000 + seq) MICROSECOND"
            )
            params: tuple[Any, ...] = (queue, status)
        elif kind == "finished":
            columns = (
                "queue, handler, payload, status, run_at, attempts, enqueued_at, started_at,"
                " finished_at, last_error"
            )
            values = (
                f"{name}, 't.noop', '{{}}', IF(MOD(seq, 10) = 0, 'dead', 'done'),"
                " NOW(6) - INTERVAL 1 DAY, 1, NOW(6) - INTERVAL 1 DAY, NOW(6) - INTERVAL 1 DAY,"
                " NOW(6) - INTERVAL 1 DAY + INTERVAL seq * 10 MICROSECOND,"
                " IF(MOD(seq, 10) = 0, 'bench: failed', NULL)"
            )
            params = (queue,)
        else:
            raise ValueError(kind)
        chunk = 250_000  # one statement each: a huge single transaction is slower here
        for start in range(first, last + 1, chunk):
            end = min(last, start + chunk - 1)
            self.sql(
                f"INSERT INTO forkq_jobs ({columns}) SELECT {values} FROM seq_{start}_to_{end}",
                params,
            )

    def settle(self, seconds: float = 15.0) -> None:
        assert self.srv is not None
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            status = self.srv.global_status("Innodb_buffer_pool_pages_%")
            total = status.get("Innodb_buffer_pool_pages_total", 1)
            if status.get("Innodb_buffer_pool_pages_dirty", 0) < 0.05 * total:
                return
            time.sleep(0.5)

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        if self.srv is not None and not self.srv.trouble():
            with contextlib.suppress(Exception):
                self.srv.admin(f"DROP DATABASE IF EXISTS `{self.name}`")


class SQLiteJobs(Jobs):
    backend = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path
        for extra in ("", "-wal", "-shm"):
            Path(f"{path}{extra}").unlink(missing_ok=True)
        self.url = f"sqlite:///{path}"
        store = open_store(self.url)
        try:
            store.apply_schema()
        finally:
            store.close()
        self.conn = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.conn.execute("PRAGMA journal_mode=WAL")

    def sql(self, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(statement, params).fetchall())

    def fill(self, kind: str, first: int, last: int, queue: str = "s", queues: int = 1) -> None:
        name = "?" if queues == 1 else f"? || (seq % {queues})"
        now = time.time()
        if kind == "scheduled":
            status = self.scheduled_status(queue if queues == 1 else f"{queue}0")
            columns = "queue, handler, payload, status, run_at, enqueued_at"
            values = f"{name}, 't.noop', '{{}}', ?, ? + 86400 + seq * 1e-6, ?"
            params: tuple[Any, ...] = (queue, status, now, now)
        elif kind == "finished":
            columns = (
                "queue, handler, payload, status, run_at, attempts, enqueued_at, started_at,"
                " finished_at, last_error"
            )
            values = (
                f"{name}, 't.noop', '{{}}', CASE WHEN seq % 10 = 0 THEN 'dead' ELSE 'done' END,"
                " ? - 86400, 1, ? - 86400, ? - 86400, ? - 86400 + seq * 1e-5,"
                " CASE WHEN seq % 10 = 0 THEN 'bench: failed' END"
            )
            params = (queue, now, now, now, now)
        else:
            raise ValueError(kind)
        chunk = 1_000_000
        for start in range(first, last + 1, chunk):
            end = min(last, start + chunk - 1)
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute(
                f"WITH RECURSIVE c(seq) AS (SELECT {start} UNION ALL SELECT seq + 1 FROM c"
                f" WHERE seq < {end}) INSERT INTO forkq_jobs ({columns}) SELECT {values} FROM c",
                params,
            )
            self.conn.execute("COMMIT")

    def settle(self, seconds: float = 15.0) -> None:
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def drop(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        for extra in ("", "-wal", "-shm"):
            Path(f"{self.path}{extra}").unlink(missing_ok=True)


def jobs_for(backend: str, name: str, workdir: Path) -> Jobs:
    """A fresh forkq database named `name` (MariaDB: on the private server)."""
    if backend == "mariadb":
        return MariaJobs(server(), f"forkq_{name}")
    return SQLiteJobs(workdir / f"{name}.db")


@contextlib.contextmanager
def fresh_jobs(backend: str, name: str, workdir: Path) -> Iterator[Jobs]:
    jobs = jobs_for(backend, name, workdir)
    try:
        yield jobs
    finally:
        jobs.drop()


# --- the daemon -----------------------------------------------------------------------------


def daemon(
    workdir: Path,
    url: str,
    name: str,
    pools: dict[str, dict[str, Any]],
    supervisor: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    modules: dict[str, str] | None = None,
) -> daemon_util.Daemon:
    """A configured, not yet started `forkq run` (the tests' launcher), in workdir/name."""
    directory = workdir / name
    settings = {**PRODUCTION_TIMERS, **(supervisor or {})}
    if modules:
        settings["handlers"] = [daemon_util.HANDLERS_MODULE, *modules]
    made = daemon_util.Daemon(
        directory, url, pools=pools, supervisor=settings, env=env or {}, name=name
    )
    for module, source in (modules or {}).items():
        made.write_module(module, source)
    return made


@contextlib.contextmanager
def running(made: daemon_util.Daemon, ready_timeout: float = 30.0) -> Iterator[daemon_util.Daemon]:
    """Started and ready (every child idle); whatever happens, every process of it is
    gone afterwards (SIGTERM first, then the tests' session-wide SIGKILL)."""
    try:
        made.start()
        made.wait_ready(timeout=ready_timeout)
        yield made
    finally:
        if made.alive():
            with contextlib.suppress(Exception):
                made.send_signal(signal.SIGTERM)
                assert made.proc is not None
                made.proc.wait(timeout=10)
        made.kill_all()


def read_records(path: Path) -> dict[int, tuple[int, float, float]]:
    """The t.record handler's lines: job id -> (pid, start, end), wall clock."""
    out: dict[int, tuple[int, float, float]] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) == 4:
            out[int(parts[0])] = (int(parts[1]), float(parts[2]), float(parts[3]))
    return out
