"""Raw-SQL drain loops: the reference forkq's daemon is measured against.

Three variants, each draining N no-op rows with W processes (multiprocessing, fork):

- `skip_locked` (MySQL/MariaDB): per batch, one transaction
  `SELECT id ... WHERE status='ready' ORDER BY id LIMIT 20 FOR UPDATE SKIP LOCKED` +
  `UPDATE ... SET status='running'`, then `DELETE ... WHERE id IN (...)`. Table
  `bench_baseline`, index (status, id). This is forkq's claim protocol with nothing
  around it: no lease columns, no JSON, no logging, no status pipe.
- `block` (MySQL/MariaDB): seed 001's partitioned "block" lock. A lock table of K
  partitions (`bench_block_locks`: part, lock_by, expire_at); a worker takes the
  least recently used free partition with one autocommit
  `UPDATE ... WHERE expire_at < NOW() ORDER BY expire_at LIMIT 1`, reads a batch of
  that partition's jobs with a plain SELECT (no row locks), runs them, deletes them,
  and frees the partition. Jobs carry `part = id % K`.
- `sqlite`: the SQLite equivalent of skip_locked: `BEGIN IMMEDIATE` +
  `UPDATE ... WHERE id IN (SELECT ... LIMIT 20) RETURNING id` + `COMMIT`, then DELETE,
  with forkq's pragmas (WAL, synchronous=FULL).

Options for what-if runs: `fused` deletes a finished batch inside the next claim's
transaction (one commit per batch instead of two), `isolation` sets the MySQL session
isolation level, `synchronous` the SQLite pragma.

The clock starts when every worker is connected (a barrier) and stops when the last
worker has seen the table empty. Use from run.py, or alone:

    .venv/bin/python benchmarks/baseline.py --url mysql://root@127.0.0.1:3306/forkq_bench \\
        --variant skip_locked --workers 4 --jobs 5000
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import queue
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from supervisor.dburl import DatabaseURL, parse_database_url

T = TypeVar("T")
VARIANTS = ("skip_locked", "block", "sqlite")
INSERT_CHUNK = 1000
PAYLOAD = "{}"
DEADLOCK, LOCK_WAIT_TIMEOUT = 1213, 1205


@dataclass(frozen=True)
class Options:
    batch: int = 20
    isolation: str = ""  # MySQL: e.g. "READ COMMITTED"; "" keeps the server's default
    fused: bool = False  # ack a batch inside the next claim's transaction (one commit per batch)
    synchronous: str = "FULL"  # SQLite


@dataclass(frozen=True)
class DrainResult:
    variant: str
    workers: int
    jobs: int
    seconds: float
    statements: int  # SQL statements sent by the workers (BEGIN/COMMIT included)
    commits: int  # transactions committed (autocommit statements count as one)
    opts: Options
    partitions: int = 0
    deadlocks: int = 0  # claim transactions rolled back by InnoDB and retried

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


# --- connections ----------------------------------------------------------------------------


def mysql_connect(url: DatabaseURL, **options: Any) -> Any:
    kwargs: dict[str, Any] = {
        "host": url.host,
        "port": url.port,
        "user": url.user,
        "password": url.password,
        "database": url.database or None,
        "unix_socket": url.unix_socket or None,
        "charset": "utf8mb4",
        "autocommit": True,
        "connect_timeout": 5,
        "read_timeout": 60,
        "write_timeout": 60,
    }
    kwargs.update(options)
    return pymysql.connect(**kwargs)


def worker_connect(url: DatabaseURL, isolation: str) -> Any:
    """A worker's connection; `isolation` ("READ COMMITTED", ...) overrides the server default."""
    if not isolation:
        return mysql_connect(url)
    return mysql_connect(url, init_command=f"SET SESSION TRANSACTION ISOLATION LEVEL {isolation}")


def sqlite_connect(path: str, synchronous: str = "FULL") -> sqlite3.Connection:
    """forkq's pragmas: WAL, a busy timeout, synchronous=FULL unless told otherwise."""
    if synchronous not in ("FULL", "NORMAL", "OFF"):
        raise ValueError(f"synchronous must be FULL, NORMAL or OFF, not {synchronous!r}")
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


# --- tables ---------------------------------------------------------------------------------


def prepare(url: DatabaseURL, variant: str, jobs: int, partitions: int) -> None:
    """(Re)create the variant's tables and fill them with `jobs` ready rows."""
    if variant == "sqlite":
        conn = sqlite_connect(url.path)
        conn.execute("DROP TABLE IF EXISTS bench_baseline")
        conn.execute(
            "CREATE TABLE bench_baseline (id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " status TEXT NOT NULL DEFAULT 'ready', payload TEXT NOT NULL)"
        )
        conn.execute("CREATE INDEX bench_baseline_status ON bench_baseline (status, id)")
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO bench_baseline (payload) VALUES (?)", [(PAYLOAD,)] * jobs)
        conn.execute("COMMIT")
        conn.close()
        return
    conn = mysql_connect(url)
    with conn.cursor() as cur:
        if variant == "skip_locked":
            cur.execute("DROP TABLE IF EXISTS bench_baseline")
            cur.execute(
                "CREATE TABLE bench_baseline (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
                " status VARCHAR(16) NOT NULL DEFAULT 'ready', payload LONGTEXT NOT NULL,"
                " PRIMARY KEY (id), KEY bench_baseline_status (status, id)) ENGINE=InnoDB"
            )
            _insert_rows(cur, "INSERT INTO bench_baseline (payload) VALUES", ["(%s)"], jobs)
        else:
            cur.execute("DROP TABLE IF EXISTS bench_block")
            cur.execute("DROP TABLE IF EXISTS bench_block_locks")
            cur.execute(
                "CREATE TABLE bench_block (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,"
                " part INT NOT NULL, payload LONGTEXT NOT NULL,"
                " PRIMARY KEY (id), KEY bench_block_part (part, id)) ENGINE=InnoDB"
            )
            cur.execute(
                "CREATE TABLE bench_block_locks (part INT NOT NULL, lock_by VARCHAR(64) NULL,"
                " expire_at TIMESTAMP(6) NOT NULL, PRIMARY KEY (part)) ENGINE=InnoDB"
            )
            cur.executemany(
                "INSERT INTO bench_block_locks (part, lock_by, expire_at)"
                " VALUES (%s, NULL, '1970-01-02 00:00:00')",
                [(p,) for p in range(partitions)],
            )
            for start in range(0, jobs, INSERT_CHUNK):
                count = min(INSERT_CHUNK, jobs - start)
                values = ",".join(
                    f"({(start + i + 1) % partitions}, '{PAYLOAD}')" for i in range(count)
                )
                cur.execute(f"INSERT INTO bench_block (part, payload) VALUES {values}")
    conn.close()


def _insert_rows(cur: Any, head: str, row: list[str], jobs: int) -> None:
    for start in range(0, jobs, INSERT_CHUNK):
        count = min(INSERT_CHUNK, jobs - start)
        cur.execute(head + " " + ",".join(row * count), [PAYLOAD] * count)


def ensure_database(url: DatabaseURL) -> bool:
    """Create the URL's MySQL database if it is missing (for running this file alone);
    True when it was created here."""
    if url.backend == "sqlite":
        return False
    conn = mysql_connect(replace(url, database=""))
    with conn.cursor() as cur:
        cur.execute(
            "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (url.database,)
        )
        if cur.fetchone():
            conn.close()
            return False
        cur.execute(f"CREATE DATABASE `{url.database}`")
    conn.close()
    return True


def drop(url: DatabaseURL) -> None:
    if url.backend == "sqlite":
        conn = sqlite_connect(url.path)
        conn.execute("DROP TABLE IF EXISTS bench_baseline")
        conn.close()
        return
    conn = mysql_connect(url)
    with conn.cursor() as cur:
        for table in ("bench_baseline", "bench_block", "bench_block_locks"):
            cur.execute(f"DROP TABLE IF EXISTS {table}")
    conn.close()


# --- workers --------------------------------------------------------------------------------


@dataclass
class Tally:
    """What one worker did: sent to the parent at the end."""

    jobs: int = 0
    statements: int = 0
    commits: int = 0
    deadlocks: int = 0

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.jobs, self.statements, self.commits, self.deadlocks)


def _retrying(conn: Any, tally: Tally, operation: Callable[[], T]) -> T:
    """Run a transaction or statement again after InnoDB chose it as a deadlock victim
    (it was rolled back), as forkq's Store._retrying does."""
    while True:
        try:
            return operation()
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in (DEADLOCK, LOCK_WAIT_TIMEOUT):
                raise
            conn.rollback()
            tally.deadlocks += 1


def _skip_locked_worker(url: DatabaseURL, opts: Options, barrier: Any, out: Any) -> None:
    conn = worker_connect(url, opts.isolation)
    cur = conn.cursor()
    tally = Tally()
    pending: list[int] = []  # run, not yet deleted (fused mode)

    def claim() -> list[int]:
        """One transaction; in fused mode the previous batch is deleted in it too."""
        conn.begin()
        if pending:
            cur.execute("DELETE FROM bench_baseline WHERE id IN %s", (pending,))
        cur.execute(
            "SELECT id FROM bench_baseline WHERE status = 'ready' ORDER BY id LIMIT %s"
            " FOR UPDATE SKIP LOCKED",
            (opts.batch,),
        )
        ids = [row[0] for row in cur.fetchall()]
        if ids:
            cur.execute("UPDATE bench_baseline SET status = 'running' WHERE id IN %s", (ids,))
        conn.commit()
        tally.statements += 3 + bool(ids) + bool(pending)
        return ids

    def ready_left() -> bool:
        cur.execute("SELECT EXISTS (SELECT 1 FROM bench_baseline WHERE status = 'ready')")
        tally.statements += 1
        return bool(cur.fetchone()[0])

    barrier.wait()
    while True:
        ids = _retrying(conn, tally, claim)
        tally.commits, tally.jobs, pending = tally.commits + 1, tally.jobs + len(pending), []
        if not ids:
            if _retrying(conn, tally, ready_left):
                continue
            break
        for _ in ids:  # the jobs: no-ops
            pass
        if opts.fused:
            pending = ids
            continue
        _retrying(conn, tally, functools.partial(cur.execute, DELETE_BASELINE, (ids,)))
        tally.statements, tally.commits, tally.jobs = (
            tally.statements + 1,
            tally.commits + 1,
            tally.jobs + len(ids),
        )
    conn.close()
    out.put(tally.as_tuple())


DELETE_BASELINE = "DELETE FROM bench_baseline WHERE id IN %s"


def _block_worker(url: DatabaseURL, opts: Options, barrier: Any, out: Any) -> None:
    """Seed 001: take a partition under a lease, work it without row locks, free it."""
    conn = worker_connect(url, opts.isolation)
    cur = conn.cursor()
    me = f"{socket.gethostname()}:{os.getpid()}"
    tally = Tally()

    def run(sql: str, params: Any) -> int:
        tally.statements += 1
        return int(_retrying(conn, tally, lambda: cur.execute(sql, params)))

    barrier.wait()
    while True:
        took = run(
            "UPDATE bench_block_locks SET lock_by = %s, expire_at = NOW(6) + INTERVAL 60 SECOND"
            " WHERE expire_at < NOW(6) ORDER BY expire_at LIMIT 1",
            (me,),
        )
        tally.commits += 1
        ids: list[int] = []
        if took:
            run(
                "SELECT id FROM bench_block WHERE part ="
                " (SELECT part FROM bench_block_locks WHERE lock_by = %s) ORDER BY id LIMIT %s",
                (me, opts.batch),
            )
            ids = [row[0] for row in cur.fetchall()]
            if ids:
                for _ in ids:  # the jobs: no-ops
                    pass
                run("DELETE FROM bench_block WHERE id IN %s", (ids,))
                tally.commits, tally.jobs = tally.commits + 1, tally.jobs + len(ids)
            run(
                "UPDATE bench_block_locks SET lock_by = NULL,"
                " expire_at = NOW(6) - INTERVAL 1 SECOND WHERE lock_by = %s",
                (me,),
            )
            tally.commits += 1
        if not ids:
            run("SELECT EXISTS (SELECT 1 FROM bench_block)", None)
            if not cur.fetchone()[0]:
                break
            if not took:
                time.sleep(0.001)  # every partition is held: let a holder finish
    conn.close()
    out.put(tally.as_tuple())


def _sqlite_worker(url: DatabaseURL, opts: Options, barrier: Any, out: Any) -> None:
    conn = sqlite_connect(url.path, opts.synchronous)
    jobs = statements = commits = 0
    pending: list[int] = []
    barrier.wait()
    while True:
        conn.execute("BEGIN IMMEDIATE")
        if pending:
            conn.execute(_delete_sqlite(pending), pending)
        ids = [
            row[0]
            for row in conn.execute(
                "UPDATE bench_baseline SET status = 'running' WHERE id IN"
                " (SELECT id FROM bench_baseline WHERE status = 'ready' ORDER BY id LIMIT ?)"
                " RETURNING id",
                (opts.batch,),
            ).fetchall()
        ]
        conn.execute("COMMIT")
        statements += 3 + bool(pending)
        commits, jobs, pending = commits + 1, jobs + len(pending), []
        if not ids:
            break  # one writer at a time: nothing ready means nothing left to claim
        for _ in ids:  # the jobs: no-ops
            pass
        if opts.fused:
            pending = ids
            continue
        conn.execute(_delete_sqlite(ids), ids)
        statements, commits, jobs = statements + 1, commits + 1, jobs + len(ids)
    conn.close()
    out.put((jobs, statements, commits, 0))


def _delete_sqlite(ids: list[int]) -> str:
    return f"DELETE FROM bench_baseline WHERE id IN ({','.join('?' * len(ids))})"


def _collect(out: Any, procs: list[Any], deadline: float) -> list[tuple[int, int, int, int]]:
    """Each worker's tally; fail at once if one died instead of waiting for the deadline."""
    totals: list[tuple[int, int, int, int]] = []
    while len(totals) < len(procs):
        try:
            totals.append(out.get(timeout=0.2))
            continue
        except queue.Empty:
            pass
        dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
        if dead:
            raise RuntimeError(f"a baseline worker died (exit code {dead[0]})")
        if time.monotonic() > deadline:
            raise TimeoutError("baseline drain passed its deadline")
    return totals


WORKERS = {"skip_locked": _skip_locked_worker, "block": _block_worker, "sqlite": _sqlite_worker}


def drain(
    url: str | DatabaseURL,
    variant: str,
    workers: int,
    jobs: int,
    opts: Options = Options(),
    *,
    partitions: int = 8,
    timeout: float = 120.0,
    fill: bool = True,
) -> DrainResult:
    """Fill the variant's table with `jobs` rows (unless `fill` is False: `prepare` was
    called already) and time W processes draining it."""
    parsed = parse_database_url(url) if isinstance(url, str) else url
    if fill:
        prepare(parsed, variant, jobs, partitions)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(workers + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=WORKERS[variant], args=(parsed, opts, barrier, out), daemon=True)
        for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=30)
        started = time.perf_counter()
        totals = _collect(out, procs, time.monotonic() + timeout)
        seconds = time.perf_counter() - started
        for proc in procs:
            proc.join(timeout=10)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
    done = sum(t[0] for t in totals)
    if done != jobs:
        raise RuntimeError(f"{variant}: drained {done} of {jobs} jobs")
    return DrainResult(
        variant,
        workers,
        done,
        seconds,
        sum(t[1] for t in totals),
        sum(t[2] for t in totals),
        opts,
        partitions if variant == "block" else 0,
        sum(t[3] for t in totals),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("FORKQ_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/forkq_bench"),
    )
    parser.add_argument("--variant", choices=VARIANTS, default="skip_locked")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=8, help="block: K")
    parser.add_argument(
        "--isolation", default="", help='MySQL, e.g. "READ COMMITTED" (default: the server\'s)'
    )
    parser.add_argument(
        "--fused", action="store_true", help="ack each batch in the next claim's transaction"
    )
    parser.add_argument("--synchronous", default="FULL", help="SQLite: FULL or NORMAL")
    parser.add_argument("--keep", action="store_true", help="leave the tables behind")
    parser.add_argument(
        "--no-fill", action="store_true", help="drain the table `prepare` filled (run.py does)"
    )
    args = parser.parse_args()
    url = parse_database_url(args.url)
    created = ensure_database(url)
    opts = Options(args.batch, args.isolation, args.fused, args.synchronous.upper())
    result = drain(
        url,
        args.variant,
        args.workers,
        args.jobs,
        opts,
        partitions=args.partitions,
        fill=not args.no_fill,
    )
    print(
        f"{result.variant} W={result.workers} {opts}: {result.jobs} jobs in"
        f" {result.seconds:.3f}s = {result.jobs_per_s:,.0f} jobs/s;"
        f" {result.statements / result.jobs:.2f} statements/job,"
        f" {result.commits / result.jobs:.3f} commits/job, {result.deadlocks} deadlocks"
    )
    if not args.keep:
        drop(url)
        if created:
            conn = mysql_connect(replace(url, database=""))
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{url.database}`")
            conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
