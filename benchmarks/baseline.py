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

The clock starts when every worker is connected (a barrier) and stops when the last
worker has seen the table empty. Use from run.py, or alone:

    .venv/bin/python benchmarks/baseline.py --url mysql://root@127.0.0.1:3306/forkq_bench \\
        --variant skip_locked --workers 4 --jobs 5000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sqlite3
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from supervisor.dburl import DatabaseURL, parse_database_url  # noqa: E402

VARIANTS = ("skip_locked", "block", "sqlite")
INSERT_CHUNK = 1000
PAYLOAD = "{}"
DEADLOCK, LOCK_WAIT_TIMEOUT = 1213, 1205


@dataclass(frozen=True)
class DrainResult:
    variant: str
    workers: int
    jobs: int
    seconds: float
    statements: int  # SQL statements sent by the workers (BEGIN/COMMIT included)
    commits: int  # transactions committed (autocommit statements count as one)
    batch: int
    partitions: int = 0
    deadlocks: int = 0  # claim transactions rolled back by InnoDB and retried
    isolation: str = ""

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
        "database": url.database,
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


def sqlite_connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
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


def _skip_locked_worker(
    url: DatabaseURL, batch: int, barrier: Any, out: Any, isolation: str = ""
) -> None:
    conn = worker_connect(url, isolation)
    cur = conn.cursor()
    jobs = statements = commits = deadlocks = 0
    barrier.wait()
    while True:
        try:
            conn.begin()
            cur.execute(
                "SELECT id FROM bench_baseline WHERE status = 'ready' ORDER BY id LIMIT %s"
                " FOR UPDATE SKIP LOCKED",
                (batch,),
            )
            ids = [row[0] for row in cur.fetchall()]
            if ids:
                cur.execute("UPDATE bench_baseline SET status = 'running' WHERE id IN %s", (ids,))
                statements += 1
            conn.commit()
        except pymysql.err.OperationalError as exc:
            if exc.args[0] not in (DEADLOCK, LOCK_WAIT_TIMEOUT):
                raise
            conn.rollback()  # the transaction is gone: claim again, as forkq's _retrying does
            statements, deadlocks = statements + 3, deadlocks + 1
            continue
        statements, commits = statements + 3, commits + 1
        if not ids:
            cur.execute("SELECT EXISTS (SELECT 1 FROM bench_baseline WHERE status = 'ready')")
            statements += 1
            if not cur.fetchone()[0]:
                break
            continue
        for _ in ids:  # the jobs: no-ops
            pass
        cur.execute("DELETE FROM bench_baseline WHERE id IN %s", (ids,))
        statements, commits, jobs = statements + 1, commits + 1, jobs + len(ids)
    conn.close()
    out.put((jobs, statements, commits, deadlocks))


def _block_worker(
    url: DatabaseURL, batch: int, barrier: Any, out: Any, isolation: str = ""
) -> None:
    """Seed 001: take a partition under a lease, work it without row locks, free it."""
    conn = worker_connect(url, isolation)
    cur = conn.cursor()
    me = f"{socket.gethostname()}:{os.getpid()}"
    jobs = statements = commits = 0
    barrier.wait()
    while True:
        took = cur.execute(
            "UPDATE bench_block_locks SET lock_by = %s, expire_at = NOW(6) + INTERVAL 60 SECOND"
            " WHERE expire_at < NOW(6) ORDER BY expire_at LIMIT 1",
            (me,),
        )
        statements, commits = statements + 1, commits + 1
        ids: list[int] = []
        if took:
            cur.execute(
                "SELECT id FROM bench_block WHERE part ="
                " (SELECT part FROM bench_block_locks WHERE lock_by = %s) ORDER BY id LIMIT %s",
                (me, batch),
            )
            ids = [row[0] for row in cur.fetchall()]
            statements += 1
            if ids:
                for _ in ids:  # the jobs: no-ops
                    pass
                cur.execute("DELETE FROM bench_block WHERE id IN %s", (ids,))
                statements, commits, jobs = statements + 1, commits + 1, jobs + len(ids)
            cur.execute(
                "UPDATE bench_block_locks SET lock_by = NULL,"
                " expire_at = NOW(6) - INTERVAL 1 SECOND WHERE lock_by = %s",
                (me,),
            )
            statements, commits = statements + 1, commits + 1
        if not ids:
            cur.execute("SELECT EXISTS (SELECT 1 FROM bench_block)")
            statements += 1
            if not cur.fetchone()[0]:
                break
            if not took:
                time.sleep(0.001)  # every partition is held: let a holder finish
    conn.close()
    out.put((jobs, statements, commits, 0))


def _sqlite_worker(
    url: DatabaseURL, batch: int, barrier: Any, out: Any, isolation: str = ""
) -> None:
    conn = sqlite_connect(url.path)
    jobs = statements = commits = 0
    barrier.wait()
    while True:
        conn.execute("BEGIN IMMEDIATE")
        ids = [
            row[0]
            for row in conn.execute(
                "UPDATE bench_baseline SET status = 'running' WHERE id IN"
                " (SELECT id FROM bench_baseline WHERE status = 'ready' ORDER BY id LIMIT ?)"
                " RETURNING id",
                (batch,),
            ).fetchall()
        ]
        conn.execute("COMMIT")
        statements, commits = statements + 3, commits + 1
        if not ids:
            break  # one writer at a time: nothing ready means nothing left to claim
        for _ in ids:  # the jobs: no-ops
            pass
        marks = ",".join("?" * len(ids))
        conn.execute(f"DELETE FROM bench_baseline WHERE id IN ({marks})", ids)
        statements, commits, jobs = statements + 1, commits + 1, jobs + len(ids)
    conn.close()
    out.put((jobs, statements, commits, 0))


WORKERS = {"skip_locked": _skip_locked_worker, "block": _block_worker, "sqlite": _sqlite_worker}


def drain(
    url: str | DatabaseURL,
    variant: str,
    workers: int,
    jobs: int,
    *,
    batch: int = 20,
    partitions: int = 8,
    isolation: str = "",
    timeout: float = 120.0,
) -> DrainResult:
    """Fill the variant's table with `jobs` rows and time W processes draining it."""
    parsed = parse_database_url(url) if isinstance(url, str) else url
    prepare(parsed, variant, jobs, partitions)
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(workers + 1)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=WORKERS[variant], args=(parsed, batch, barrier, out, isolation), daemon=True
        )
        for _ in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=30)
        started = time.perf_counter()
        deadline = time.monotonic() + timeout
        totals = [out.get(timeout=max(0.1, deadline - time.monotonic())) for _ in procs]
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
        batch,
        partitions if variant == "block" else 0,
        sum(t[3] for t in totals),
        isolation,
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
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument(
        "--isolation", default="", help='e.g. "READ COMMITTED" (default: the server\'s)'
    )
    parser.add_argument("--keep", action="store_true", help="leave the tables behind")
    args = parser.parse_args()
    url = parse_database_url(args.url)
    result = drain(
        url,
        args.variant,
        args.workers,
        args.jobs,
        batch=args.batch,
        partitions=args.partitions,
        isolation=args.isolation,
    )
    print(
        f"{result.variant} W={result.workers} batch={result.batch}: {result.jobs} jobs in"
        f" {result.seconds:.3f}s = {result.jobs_per_s:,.0f} jobs/s;"
        f" {result.statements / result.jobs:.2f} statements/job,"
        f" {result.commits / result.jobs:.3f} commits/job, {result.deadlocks} deadlocks"
    )
    if not args.keep:
        drop(url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
