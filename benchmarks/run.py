"""forkq benchmarks: `make bench` (or `.venv/bin/python benchmarks/run.py`).

Measures, on MariaDB/MySQL and on SQLite, what a user of forkq pays for it:

1. enqueue   `Queue.enqueue` (one commit each) against a raw driver INSERT loop, and
             `Queue.enqueue_many` in batches of 1,000;
2. drain     N no-op jobs worked off by the real daemon (`python -m supervisor run`)
             with one pool of W = 2 and W = 4 children, against raw-SQL loops
             (benchmarks/baseline.py: SKIP LOCKED, and seed 001's partition locks);
3. latency   enqueue → handler start on an idle daemon, 200 jobs 20 ms apart;
4. idle      queries per second an idle daemon sends (MariaDB per-user counters);
5. memory    master RSS and per-child USS after 10,000 jobs;
6. scale     claim + complete cost with 10k vs 1M finished rows, and the plan;
7. claims, tick, wake, silent, trickle: scheduled jobs, the check tick at 5M rows,
             same-host wake-up, the master with a silent database, issue 11's
             reproduction, on a private mariadbd (benchmarks/scale.py).

Every figure is printed with its target and PASS/MISS; the whole run is bounded
(each section has a deadline, the daemon runs in its own session and its processes
are killed on any error) and writes benchmarks/RESULTS.md, keeping that file's
hand-written "## Profile" section. MariaDB comes from FORKQ_BENCH_MYSQL_URL
(default mysql://root@127.0.0.1:3306/forkq_bench): that database and a user
`forkq_bench` are created for the run and dropped after it.

    .venv/bin/python benchmarks/run.py                      # everything, both backends
    .venv/bin/python benchmarks/run.py --backends sqlite --sections drain,latency --no-write
    .venv/bin/python benchmarks/run.py --profile            # cProfile of a drain (master + children)
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import re
import resource
import secrets
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for entry in (str(REPO), str(BENCH_DIR)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

import baseline  # noqa: E402
import bench_handlers  # noqa: E402  (registers bench.* here too: enqueue finds their queue)
import commands  # noqa: E402  (section commands: a command handler's per-job overhead)
import psutil  # noqa: E402
import scale  # noqa: E402  (sections claims, tick, wake, silent, trickle)

from supervisor import Queue  # noqa: E402
from supervisor.dburl import parse_database_url  # noqa: E402
from supervisor.store import Store, open_store  # noqa: E402

DEFAULT_MYSQL_URL = "mysql://root@127.0.0.1:3306/forkq_bench"
BENCH_USER = "forkq_bench"
QUEUE = bench_handlers.QUEUE
RESULTS = BENCH_DIR / "RESULTS.md"
PROFILE_HEADING = "## Profile"
TOTAL_BUDGET = 570.0 + scale.BUDGET  # seconds: ten minutes, plus scale.py's sections
POLL = 0.01  # seconds between COUNT(*) polls while a drain runs
PARTITIONS = 8  # K of the seed-001 partition-lock baseline

# The query changes proposed in RESULTS.md, shown beside the shipped ones in the plans.
MYSQL_CLAIM_HINT = "FORCE INDEX (forkq_jobs_claim)"
SQLITE_CLAIM_HINT = "INDEXED BY forkq_jobs_claim"
MYSQL_DUE_QUEUES = """SELECT q.queue, TIMESTAMPDIFF(MICROSECOND, NOW(6),
       (SELECT j.run_at FROM forkq_jobs j WHERE j.status = 'ready' AND j.queue = q.queue
        ORDER BY j.run_at LIMIT 1)) AS wait_us
FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (queue VARCHAR(64) PATH '$')) AS q"""
SQLITE_DUE_QUEUES = """SELECT q.value AS queue,
       CAST(((SELECT MIN(j.run_at) FROM forkq_jobs j
              WHERE j.status = 'ready' AND j.queue = q.value) - :now) * 1000000 AS INTEGER) AS wait_us
FROM json_each(:queues) AS q"""


# --- figures --------------------------------------------------------------------------------


@dataclass
class Figure:
    backend: str
    section: str
    name: str
    value: float | None
    unit: str
    target: tuple[str, float] | None = None  # ("<=", 50.0)
    note: str = ""
    error: str = ""

    @property
    def verdict(self) -> str:
        if self.error:
            return "ERROR"
        if self.target is None or self.value is None:
            return "info"
        op, bound = self.target
        ok = self.value <= bound if op == "<=" else self.value >= bound
        return "PASS" if ok else "MISS"

    def shown_value(self) -> str:
        if self.error:
            return self.error
        if self.value is None:
            return "n/a"
        return f"{_num(self.value)} {self.unit}".strip()

    def shown_target(self) -> str:
        if self.target is None:
            return "—"
        op, bound = self.target
        return f"{'≤' if op == '<=' else '≥'} {_num(bound)} {self.unit}".strip()


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    plans: dict[str, str] = field(default_factory=dict)  # title -> preformatted text
    notes: list[str] = field(default_factory=list)
    machine: dict[str, str] = field(default_factory=dict)

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        line = (
            f"  {figure.backend:7} {figure.section:8} {figure.name:44} {figure.shown_value():>18}"
        )
        if figure.target is not None or figure.error:
            line += f"   target {figure.shown_target():>12}  {figure.verdict}"
        if figure.note:
            line += f"   ({figure.note})"
        print(line, flush=True)
        return figure


# --- deadlines ------------------------------------------------------------------------------


class SectionTimeout(Exception):
    pass


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def check(self, what: str) -> None:
        if self.remaining() <= 0:
            raise SectionTimeout(f"deadline passed while {what}")


def wait_for(
    predicate: Callable[[], Any], deadline: Deadline, what: str, interval: float = 0.05
) -> Any:
    while True:
        value = predicate()
        if value:
            return value
        deadline.check(f"waiting for {what}")
        time.sleep(interval)


# --- backends -------------------------------------------------------------------------------


class Backend:
    """One database under test: how the bench reaches it, and how the daemon does."""

    name: str
    admin_url: str  # what the bench process uses (counts, resets, baselines)
    daemon_url: str  # what the daemon and the stores use

    def setup(self) -> None: ...
    def sibling(self, suffix: str) -> Backend: ...
    def teardown(self) -> None: ...
    def count(self, where: str = "1 = 1", table: str = "forkq_jobs") -> int: ...
    def reset(self) -> None: ...
    def raw_insert_loop(self, n: int) -> float: ...
    def fill_finished(self, start: int, end: int) -> None: ...
    def add_ready(self, n: int, delay: float = 0.0, queue: str = QUEUE) -> None: ...
    def delete_ready(self) -> None: ...
    def settle(self, deadline: Deadline) -> None: ...
    def query_ms(self, sql: str, params: dict[str, Any], repeats: int) -> float: ...
    def ids(self, values: list[str]) -> Any: ...
    def explain(self, store: Store, name: str, params: dict[str, Any]) -> str: ...
    def server(self) -> dict[str, str]: ...

    def counters(self) -> dict[str, float] | None:
        """Server-side counters of the daemon's own user (None where not measurable)."""
        return None

    def queries(self) -> int | None:
        counters = self.counters()
        return None if counters is None else int(counters["statements"])


class MySQLBackend(Backend):
    name = "mariadb"

    def __init__(self, url: str, primary: bool = True) -> None:
        self.primary = primary  # the primary also owns the bench user and userstat
        self.url = parse_database_url(url)
        if self.url.backend != "mysql" or not re.fullmatch(r"\w+", self.url.database):
            raise SystemExit(
                "FORKQ_BENCH_MYSQL_URL must be a mysql:// URL with a plain database name"
            )
        self.admin_url = url
        self.password = secrets.token_hex(12)
        if self.url.unix_socket:
            self.user_host = "localhost"
        elif self.url.host in ("127.0.0.1", "localhost", "::1"):
            self.user_host = self.url.host
        else:
            self.user_host = "%"
        self.daemon_url = (
            f"mysql://{BENCH_USER}:{self.password}@{self.url.host}:{self.url.port}/{self.url.database}"
            + (f"?unix_socket={self.url.unix_socket}" if self.url.unix_socket else "")
        )
        self.conn: Any = None
        self.lock_conn: Any = None
        self.userstat_was: str | None = None
        self.is_mariadb = False

    def sibling(self, suffix: str) -> MySQLBackend:
        """Another database on the same server, for measurements that alternate between two."""
        parts = urlsplit(self.admin_url)
        url = urlunsplit(parts._replace(path=f"/{self.url.database}_{suffix}"))
        return MySQLBackend(url, primary=False)

    def connect(self, database: bool = True) -> Any:
        return baseline.mysql_connect(self.url if database else replace(self.url, database=""))

    def _exec(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())

    def setup(self) -> None:
        server = self.connect(database=False)
        name = self.url.database
        if self.primary:
            self._take_run_lock()
        with server.cursor() as cur:
            cur.execute("SELECT VERSION()")
            self.is_mariadb = "mariadb" in cur.fetchone()[0].lower()
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        if self.primary:
            self._create_user(server)
        server.close()
        self.conn = self.connect()
        open_store(self.admin_url).apply_schema()

    def _take_run_lock(self) -> None:
        """One benchmark run per server at a time: a second one would drop our database."""
        self.lock_conn = self.connect(database=False)
        with self.lock_conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 0)", (f"forkq-bench:{self.url.database}",))
            if cur.fetchone()[0] != 1:
                self.lock_conn.close()
                self.lock_conn = None
                raise RuntimeError(
                    f"another benchmark run is using database {self.url.database!r} on this"
                    " server; wait for it to finish"
                )

    def _create_user(self, server: Any) -> None:
        """The daemon's own user, so per-user counters show the daemon's statements only."""
        name = self.url.database
        with server.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{BENCH_USER}'@'{self.user_host}'")
            cur.execute(
                f"CREATE USER '{BENCH_USER}'@'{self.user_host}' IDENTIFIED BY %s", (self.password,)
            )
            cur.execute(f"GRANT ALL ON `{name}`.* TO '{BENCH_USER}'@'{self.user_host}'")
            if self.is_mariadb:
                cur.execute("SELECT @@GLOBAL.userstat")
                self.userstat_was = str(cur.fetchone()[0])
                cur.execute("SET GLOBAL userstat = 1")

    def teardown(self) -> None:
        if self.primary and self.lock_conn is None:
            return  # set-up never got the run lock: the database is another run's
        with contextlib.suppress(Exception):
            self.conn.close()
        server = self.connect(database=False)
        with server.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{self.url.database}`")
            if self.primary:
                cur.execute(f"DROP USER IF EXISTS '{BENCH_USER}'@'{self.user_host}'")
            if self.userstat_was is not None:
                cur.execute(f"SET GLOBAL userstat = {int(self.userstat_was in ('1', 'ON'))}")
        server.close()
        if self.lock_conn is not None:
            self.lock_conn.close()  # releases the run lock

    def count(self, where: str = "1 = 1", table: str = "forkq_jobs") -> int:
        return int(self._exec(f"SELECT COUNT(*) FROM {table} WHERE {where}")[0][0])

    def reset(self) -> None:
        self._exec("TRUNCATE forkq_jobs")
        for table in ("forkq_jobs_archive", "forkq_processes", "forkq_locks", "forkq_alerts"):
            self._exec(f"DELETE FROM {table}")

    def raw_insert_loop(self, n: int) -> float:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                started = time.perf_counter()
                for i in range(n):
                    cur.execute(
                        "INSERT INTO forkq_jobs (queue, handler, payload) VALUES (%s, %s, %s)",
                        (QUEUE, "bench.noop", json.dumps({"i": i})),
                    )
                return time.perf_counter() - started
        finally:
            conn.close()

    def fill_finished(self, start: int, end: int) -> None:
        """Rows start..end (1-based) as done / dead (one in ten) jobs finished in the last day."""
        if self.is_mariadb:
            source = f"seq_{start}_to_{end}"  # the SEQUENCE engine
        else:
            self._exec("SET SESSION cte_max_recursion_depth = 2000000")
            source = (
                f"(WITH RECURSIVE c(seq) AS (SELECT {start} UNION ALL SELECT seq + 1 FROM c"
                f" WHERE seq < {end}) SELECT seq FROM c) AS s"
            )
        self._exec(
            "INSERT INTO forkq_jobs (queue, handler, payload, status, run_at, attempts,"
            " enqueued_at, started_at, finished_at, last_error)"
            " SELECT %s, 'bench.noop', '{}', IF(MOD(seq, 10) = 0, 'dead', 'done'),"
            " NOW(6) - INTERVAL 1 DAY, 1, NOW(6) - INTERVAL 1 DAY, NOW(6) - INTERVAL 1 DAY,"
            " NOW(6) - INTERVAL (2000000 - seq) * 40000 MICROSECOND,"
            f" IF(MOD(seq, 10) = 0, 'bench: failed', NULL) FROM {source}",
            (QUEUE,),
        )

    def add_ready(self, n: int, delay: float = 0.0, queue: str = QUEUE) -> None:
        """`n` ready jobs, due now or (with `delay` seconds) later."""
        row = "(%s, 'bench.noop', '{}', NOW(6) + INTERVAL %s MICROSECOND)"
        for start in range(0, n, 5000):
            count = min(5000, n - start)
            self._exec(
                "INSERT INTO forkq_jobs (queue, handler, payload, run_at) VALUES "
                + ",".join([row] * count),
                [queue, int(delay * 1e6)] * count,
            )

    def delete_ready(self) -> None:
        self._exec("DELETE FROM forkq_jobs WHERE status = 'ready'")

    def settle(self, deadline: Deadline) -> None:
        """Let InnoDB write back what a bulk insert left dirty and purge what a bulk delete
        left delete-marked (a range scan steps over those), so neither times our claims."""
        total = float(self._exec("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_total'")[0][1])
        until = time.monotonic() + min(30.0, max(0.0, deadline.remaining() - 60))
        while time.monotonic() < until:
            dirty = float(
                self._exec("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")[0][1]
            )
            history = self._exec(
                "SELECT count FROM information_schema.INNODB_METRICS"
                " WHERE name = 'trx_rseg_history_len'"
            )
            if dirty < 0.02 * total and (not history or int(history[0][0]) < 1000):
                return
            time.sleep(0.5)

    def query_ms(self, sql: str, params: dict[str, Any], repeats: int) -> float:
        """Median time of one statement inside a transaction that is rolled back."""
        times = []
        with self.conn.cursor() as cur:
            for _ in range(repeats):
                self.conn.begin()
                started = time.perf_counter()
                cur.execute(sql, params)
                cur.fetchall()
                times.append(time.perf_counter() - started)
                self.conn.rollback()
        return statistics.median(times) * 1000

    def ids(self, values: list[str]) -> Any:
        return tuple(values)

    def explain(self, store: Store, name: str, params: dict[str, Any]) -> str:
        """EXPLAIN, and what running it costs (handler reads, ms), for the query as shipped
        and for the proposed alternative, so the plan section shows the fix too."""
        with self.conn.cursor() as cur:
            sql = cur.mogrify(store.queries[name], params)
            out = [sql, "", self._explain_one(cur, sql)]
            if name == "claim_select":
                label, alt = _hint_variant(sql, MYSQL_CLAIM_HINT)
                out += ["", label, self._explain_one(cur, alt)]
            if name == "due_queues" and "JSON_TABLE" not in store.queries[name]:
                queues = json.dumps(list(params["queues"]))
                alt = cur.mogrify(MYSQL_DUE_QUEUES, {"queues": queues})
                out += [
                    "",
                    "Proposed: one index dive per queue",
                    alt,
                    "",
                    self._explain_one(cur, alt),
                ]
            return "\n".join(out)

    def _explain_one(self, cur: Any, sql: str) -> str:
        cur.execute(f"EXPLAIN {sql}")
        header = [d[0] for d in cur.description]
        table = _text_table(header, list(cur.fetchall()))
        times = []
        for _ in range(3):  # the median of three: the first run may read cold pages
            cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
            before = {k: int(v) for k, v in cur.fetchall()}
            self.conn.begin()
            started = time.perf_counter()
            cur.execute(sql)
            cur.fetchall()
            times.append((time.perf_counter() - started) * 1000)
            self.conn.rollback()
            cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
            reads = {k: int(v) - before[k] for k, v in cur.fetchall() if int(v) != before[k]}
        shown = ", ".join(f"{k} {v:,}" for k, v in reads.items())
        ms = statistics.median(times)
        return f"EXPLAIN:\n{table}\nRun (rolled back, median of 3): {ms:.2f} ms; {shown}"

    def server(self) -> dict[str, str]:
        rows = self._exec(
            "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin,"
            " @@innodb_buffer_pool_size, @@tx_isolation"
            if self.is_mariadb
            else "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin,"
            " @@innodb_buffer_pool_size, @@transaction_isolation"
        )[0]
        return {
            "MariaDB/MySQL": str(rows[0]),
            "innodb_flush_log_at_trx_commit": str(rows[1]),
            "sync_binlog / log_bin": f"{rows[2]} / {rows[3]}",
            "innodb_buffer_pool_size": f"{int(rows[4]) // 2**20} MiB",
            "isolation": str(rows[5]),
        }

    def counters(self) -> dict[str, float] | None:
        """USER_STATISTICS of the bench user, and InnoDB's global lock counters."""
        if not self.is_mariadb:
            return None
        rows = self._exec(
            "SELECT SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS, COMMIT_TRANSACTIONS,"
            " ROLLBACK_TRANSACTIONS, BUSY_TIME, CPU_TIME, ROWS_READ"
            " FROM information_schema.USER_STATISTICS WHERE USER = %s",
            (BENCH_USER,),
        )
        values = [float(v) for v in rows[0]] if rows else [0.0] * 6
        out = dict(
            zip(
                ("statements", "commits", "rollbacks", "busy", "cpu", "rows_read"),
                values,
                strict=True,
            )
        )
        for name, value in self._exec(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_deadlocks', 'Innodb_row_lock_waits')"
        ):
            out[name] = float(value)
        return out


class SQLiteBackend(Backend):
    name = "sqlite"

    def __init__(self, directory: Path, filename: str = "bench.db") -> None:
        self.directory = directory
        self.path = directory / filename
        self.admin_url = self.daemon_url = f"sqlite:///{self.path}"
        self.conn: sqlite3.Connection | None = None

    def sibling(self, suffix: str) -> SQLiteBackend:
        return SQLiteBackend(self.directory, f"bench_{suffix}.db")

    def setup(self) -> None:
        open_store(self.daemon_url).apply_schema()
        self.conn = baseline.sqlite_connect(str(self.path))

    def teardown(self) -> None:
        if self.conn is not None:
            self.conn.close()
        if self.path.name != "bench.db":  # a sibling: its file goes now
            for extra in ("", "-wal", "-shm"):
                Path(f"{self.path}{extra}").unlink(missing_ok=True)

    def _db(self) -> sqlite3.Connection:
        assert self.conn is not None
        return self.conn

    def count(self, where: str = "1 = 1", table: str = "forkq_jobs") -> int:
        return int(self._db().execute(f"SELECT COUNT(*) FROM {table} WHERE {where}").fetchone()[0])

    def reset(self) -> None:
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        for table in (
            "forkq_jobs",
            "forkq_jobs_archive",
            "forkq_processes",
            "forkq_locks",
            "forkq_alerts",
        ):
            db.execute(f"DELETE FROM {table}")
        db.execute("COMMIT")

    def raw_insert_loop(self, n: int) -> float:
        conn = baseline.sqlite_connect(str(self.path))  # forkq's pragmas: WAL, synchronous=FULL
        try:
            started = time.perf_counter()
            for i in range(n):
                conn.execute(
                    "INSERT INTO forkq_jobs (queue, handler, payload) VALUES (?, ?, ?)",
                    (QUEUE, "bench.noop", json.dumps({"i": i})),
                )
            return time.perf_counter() - started
        finally:
            conn.close()

    def fill_finished(self, start: int, end: int) -> None:
        now = time.time()
        db = self._db()
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "WITH RECURSIVE c(seq) AS (SELECT ? UNION ALL SELECT seq + 1 FROM c WHERE seq < ?)"
            " INSERT INTO forkq_jobs (queue, handler, payload, status, run_at, attempts,"
            " enqueued_at, started_at, finished_at, last_error)"
            " SELECT ?, 'bench.noop', '{}', CASE WHEN seq % 10 = 0 THEN 'dead' ELSE 'done' END,"
            " ? - 86400, 1, ? - 86400, ? - 86400, ? - (2000000 - seq) * 0.04,"
            " CASE WHEN seq % 10 = 0 THEN 'bench: failed' END FROM c",
            (start, end, QUEUE, now, now, now, now),
        )
        db.execute("COMMIT")

    def add_ready(self, n: int, delay: float = 0.0, queue: str = QUEUE) -> None:
        db = self._db()
        now = time.time()
        db.execute("BEGIN IMMEDIATE")
        db.executemany(
            "INSERT INTO forkq_jobs (queue, handler, payload, run_at, enqueued_at)"
            " VALUES (?, 'bench.noop', '{}', ?, ?)",
            [(queue, now + delay, now)] * n,
        )
        db.execute("COMMIT")

    def delete_ready(self) -> None:
        self._db().execute("DELETE FROM forkq_jobs WHERE status = 'ready'")

    def settle(self, deadline: Deadline) -> None:
        """Checkpoint the WAL a bulk insert grew, so it does not time our claims."""
        self._db().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def query_ms(self, sql: str, params: dict[str, Any], repeats: int) -> float:
        db = self._db()
        times = []
        for _ in range(repeats):
            db.execute("BEGIN")
            started = time.perf_counter()
            db.execute(sql, params).fetchall()
            times.append(time.perf_counter() - started)
            db.execute("ROLLBACK")
        return statistics.median(times) * 1000

    def ids(self, values: list[str]) -> Any:
        return json.dumps(values)

    def explain(self, store: Store, name: str, params: dict[str, Any]) -> str:
        sql = store.queries[name]
        out = [sql, "", self._explain_one(sql, params)]
        if name == "claim_select":
            label, alt = _hint_variant(sql, SQLITE_CLAIM_HINT)
            out += ["", label, self._explain_one(alt, params)]
        if name == "due_queues" and "json_each(:queues) AS q" not in sql:
            out += ["", "Proposed: one index dive per queue", SQLITE_DUE_QUEUES, ""]
            out.append(self._explain_one(SQLITE_DUE_QUEUES, params))
        return "\n".join(out)

    def _explain_one(self, sql: str, params: dict[str, Any]) -> str:
        db = self._db()
        plan = db.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
        ms = self.query_ms(sql, params, 5)
        return (
            "EXPLAIN QUERY PLAN:\n" + "\n".join(f"  {r[3]}" for r in plan) + f"\nRun: {ms:.2f} ms"
        )

    def server(self) -> dict[str, str]:
        return {
            "SQLite": sqlite3.sqlite_version,
            "pragmas (forkq)": "journal_mode=WAL, synchronous=FULL",
        }


def _hint_variant(sql: str, hint: str) -> tuple[str, str]:
    """The claim with the index hint if it ships without one, else without it."""
    if hint in sql:
        label = f"For comparison: without {hint} (what the planner picks alone)"
        return label, sql.replace(f" {hint}", "", 1)
    label = f"Proposed: the same with {hint}"
    return label, sql.replace("FROM forkq_jobs", f"FROM forkq_jobs {hint}", 1)


def _text_table(header: list[str], rows: list[tuple[Any, ...]]) -> str:
    cells = [header] + [["NULL" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        "  " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells
    )


def _per_job(
    before: dict[str, float] | None, after: dict[str, float] | None, n: int
) -> dict[str, float]:
    """Server-side cost of a drain from two counter snapshots."""
    if before is None or after is None:
        return {}
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    return {
        "statements_per_job": delta["statements"] / n,
        "rows_read_per_job": delta["rows_read"] / n,
        "busy_us_per_job": delta["busy"] / n * 1e6,
        "cpu_us_per_job": delta["cpu"] / n * 1e6,
        "deadlocks": delta.get("Innodb_deadlocks", 0.0),
        "lock_waits": delta.get("Innodb_row_lock_waits", 0.0),
    }


def _rates(timeline: list[tuple[float, int]], start: float, n: int) -> dict[str, float]:
    """Rates from a drain's (time, rows left) polls: from `start` to the last row gone, and
    the steady state from 95% to 5% left (no interpreter start, imports or forks)."""
    end = timeline[-1][0]
    t95 = next(t for t, c in timeline if c <= 0.95 * n)
    t05 = next(t for t, c in timeline if c <= 0.05 * n)
    first = next(t for t, c in timeline if c < n)
    return {
        "rate": n / (end - start),
        "steady": 0.9 * n / (t05 - t95) if t05 > t95 else float("nan"),
        "boot": first - start,
    }


def _median_run(runs: list[dict[str, float]], key: str = "rate") -> dict[str, float]:
    return sorted(runs, key=lambda r: r[key])[len(runs) // 2]


def _children_cpu() -> float:
    """CPU seconds (user + system) of every child process this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cost_note(run: dict[str, float]) -> str:
    cpu = (
        f"client CPU {run['client_cpu_us_per_job']:.0f} µs/job, "
        if "client_cpu_us_per_job" in run
        else ""
    )
    if "statements_per_job" not in run:
        if "client_statements" in run:
            return f"{cpu}{run['client_statements']:.2f} statements/job"
        return cpu.rstrip(", ")
    return cpu + (
        f"{run['statements_per_job']:.2f} statements/job, {run['rows_read_per_job']:.1f} rows read/job,"
        f" server busy {run['busy_us_per_job']:.0f} µs/job, {run['deadlocks']:.0f} deadlocks,"
        f" {run['lock_waits']:.0f} row-lock waits"
    )


# --- the daemon -----------------------------------------------------------------------------


class Daemon:
    """`python -m supervisor run -c cfg` in its own session; every process killed on error."""

    def __init__(self, workdir: Path, url: str, workers: int, tag: str, **pool: Any) -> None:
        self.workdir = workdir
        self.url = url
        self.workers = workers
        self.config = workdir / f"{tag}.toml"
        self.log_path = workdir / f"{tag}.log"
        self.stamp_file = workdir / f"{tag}.stamps"
        lines = [  # the URL comes from FORKQ_DATABASE_URL: no password in the file
            "[supervisor]",
            'handlers = ["bench_handlers"]',
            "check_interval = 10",
            "shutdown_timeout = 10",
            f"[pools.{QUEUE}]",
            f"workers = {workers}",
            f"max_workers = {workers}",
            "timeout = 60",
        ] + [f"{key} = {value}" for key, value in pool.items()]
        self.config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.extra_env: dict[str, str] = {}

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            FORKQ_DATABASE_URL=self.url,
            PYTHONPATH=os.pathsep.join(
                [str(BENCH_DIR), str(REPO), env.get("PYTHONPATH", "")]
            ).rstrip(os.pathsep),
            FORKQ_LOG_FORMAT="json",
            PYTHONUNBUFFERED="1",
            **{bench_handlers.STAMP_FILE_ENV: str(self.stamp_file)},
        )
        env.update(self.extra_env)
        return env

    def command(self) -> list[str]:
        return [sys.executable, "-m", "supervisor", "run", "-c", str(self.config)]

    def start(self, command: list[str] | None = None) -> None:
        log = self.log_path.open("ab")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            command or self.command(),
            cwd=REPO,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def master(self) -> psutil.Process:
        assert self.proc is not None
        return psutil.Process(self.proc.pid)

    def children(self) -> list[psutil.Process]:
        try:
            return self.master().children()
        except psutil.NoSuchProcess:
            return []

    def all_idle(self) -> bool:
        """Every child is up and reports idle (its process title)."""
        self.check_alive()
        kids = self.children()
        try:
            return len(kids) == self.workers and all("idle" in " ".join(k.cmdline()) for k in kids)
        except psutil.Error:
            return False

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (graceful), then SIGKILL everything left past `timeout`."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is None:
            return
        procs = self.children()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        for child in procs:  # children run in process groups of their own
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            with contextlib.suppress(psutil.Error):
                child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)

    def tail(self, lines: int = 8) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def __enter__(self) -> Daemon:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.stop()
        else:
            self.kill()


# --- the run --------------------------------------------------------------------------------


@dataclass
class Settings:
    enqueue_single: int = 4000
    enqueue_many: int = 50_000
    many_batch: int = 1000
    drain_jobs: int = 5000
    drain_repeats: int = 3  # forkq drains per W (median kept, like the baselines)
    baseline_repeats: int = 3  # baseline drains per variant and W (median kept)
    latency_jobs: int = 200
    latency_gap: float = 0.020
    idle_window: float = 31.0  # > IDLE_RECHECK (30 s): includes every child's own re-check
    idle_children: tuple[int, ...] = (2, 16)
    memory_jobs: int = 10_000
    scale_small: int = 10_000
    scale_large: int = 1_000_000
    scale_ready: int = 1000
    scale_batches: int = 200
    scale_backlog: int = 50_000
    scale_backlog_batches: int = 20
    is_quick: bool = False  # scale.py's sections read it for their own small sizes

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            is_quick=True,
            enqueue_single=300,
            enqueue_many=5000,
            drain_jobs=1000,
            drain_repeats=1,
            baseline_repeats=1,
            latency_jobs=50,
            idle_window=5.0,
            memory_jobs=2000,
            scale_large=100_000,
            scale_batches=50,
            scale_backlog=10_000,
        )


class Bench:
    def __init__(self, backend: Backend, report: Report, settings: Settings, workdir: Path) -> None:
        self.b = backend
        self.report = report
        self.s = settings
        self.workdir = workdir
        self.daemon_command: list[str] | None = None  # the lab's wrapper instead of -m supervisor
        self.daemon_env: dict[str, str] = {}
        self.pool: dict[str, Any] = {}  # extra [pools.bench] keys for drains

    def fig(self, section: str, name: str, value: float | None, unit: str, **kw: Any) -> Figure:
        return self.report.add(Figure(self.b.name, section, name, value, unit, **kw))

    def enqueue_jobs(self, n: int, handler: str = "bench.noop") -> None:
        q = Queue(self.b.admin_url)
        try:
            for start in range(0, n, 1000):
                q.enqueue_many(
                    [
                        {"handler": handler, "payload": {"i": i}}
                        for i in range(start, min(n, start + 1000))
                    ]
                )
        finally:
            q.close()

    # 1. enqueue -------------------------------------------------------------------------------

    def enqueue(self, deadline: Deadline) -> None:
        """Single enqueues and the raw INSERT loop alternate in short rounds, each going
        first in every other round, so drift and a stray fsync stall hit both; the ratio
        is the median of the rounds' ratios (one stall in one round does not decide it)."""
        s = self.s
        self.b.reset()
        q = Queue(self.b.admin_url)
        try:
            q.enqueue("bench.noop", {"warm": True})  # connect outside the clock
            rounds = 20
            per_round = s.enqueue_single // rounds
            single_s = raw_s = 0.0
            ratios = []
            for r in range(rounds):
                raw_first = r % 2 == 1
                raw_round = self.b.raw_insert_loop(per_round) if raw_first else 0.0
                started = time.perf_counter()
                for i in range(per_round):
                    q.enqueue("bench.noop", {"i": r * per_round + i})
                single_round = time.perf_counter() - started
                if not raw_first:
                    raw_round = self.b.raw_insert_loop(per_round)
                single_s += single_round
                raw_s += raw_round
                ratios.append(raw_round / single_round)
                deadline.check("enqueuing one by one")
            single = rounds * per_round / single_s
            raw = rounds * per_round / raw_s
            self.fig(
                "enqueue",
                f"Queue.enqueue, 1 commit each (n={s.enqueue_single:,})",
                single,
                "jobs/s",
            )
            self.fig("enqueue", "raw driver INSERT loop, autocommit (baseline)", raw, "jobs/s")
            self.fig(
                "enqueue",
                f"enqueue / raw INSERT, median of {rounds} alternating rounds",
                statistics.median(ratios),
                "x",
                target=(">=", 0.9),
            )
            self.b.reset()
            specs = [{"handler": "bench.noop", "payload": {"i": i}} for i in range(s.many_batch)]
            started = time.perf_counter()
            for _ in range(s.enqueue_many // s.many_batch):
                q.enqueue_many(specs)
                deadline.check("enqueue_many")
            many = s.enqueue_many / (time.perf_counter() - started)
            self.fig(
                "enqueue",
                f"Queue.enqueue_many, batches of {s.many_batch:,} (n={s.enqueue_many:,})",
                many,
                "jobs/s",
                target=(">=", 20_000.0),
            )
        finally:
            q.close()
            self.b.reset()

    # 2. drain ---------------------------------------------------------------------------------

    def forkq_drain(self, workers: int, deadline: Deadline, tag: str) -> dict[str, float]:
        """One drain of N no-op jobs by the real daemon; rates and server-side costs."""
        n = self.s.drain_jobs
        self.b.reset()
        self.enqueue_jobs(n)
        title = f"claim_select with {n:,} ready rows (what each drain claim runs)"
        if f"{self.b.name}: {title}" not in self.report.plans:
            store = open_store(self.b.admin_url)
            try:
                params = {"queue": QUEUE, "limit": 20, "now": time.time()}
                self.plan(self.b, store, title, "claim_select", params)
            finally:
                store.close()
        before = self.b.counters()
        cpu_before = _children_cpu()
        timeline: list[tuple[float, int]] = []
        with Daemon(self.workdir, self.b.daemon_url, workers, tag, **self.pool) as daemon:
            daemon.extra_env = self.daemon_env
            command = None
            if self.daemon_command:
                command = [*self.daemon_command, "run", "-c", str(daemon.config)]
            daemon.start(command)
            while True:
                left = self.b.count()
                timeline.append((time.perf_counter(), left))
                if left == 0:
                    break
                daemon.check_alive()
                deadline.check(f"draining {n} jobs with W={workers}")
                time.sleep(POLL)
            after = self.b.counters()
        cpu = _children_cpu() - cpu_before  # the daemon has been waited for: all of its tree
        out = _rates(timeline, daemon.started, n)
        out["client_cpu_us_per_job"] = cpu / n * 1e6
        out.update(_per_job(before, after, n))
        return out

    def baseline_program(self, variant: str, workers: int, deadline: Deadline) -> dict[str, float]:
        """The raw loop as a program of its own, timed exactly like the daemon: from launch
        (interpreter, imports, fork, connect) to the last row gone, by the same poller."""
        n = self.s.drain_jobs
        url = parse_database_url(self.b.daemon_url)
        baseline.prepare(url, variant, n, PARTITIONS)
        command = [
            sys.executable,
            str(BENCH_DIR / "baseline.py"),
            f"--url={self.b.daemon_url}",
            f"--variant={variant}",
            f"--workers={workers}",
            f"--jobs={n}",
            "--no-fill",
            "--keep",
        ]
        cpu_before = _children_cpu()
        timeline: list[tuple[float, int]] = []
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            while True:
                left = self.b.count(table="bench_baseline")
                timeline.append((time.perf_counter(), left))
                if left == 0:
                    break
                if proc.poll() is not None:
                    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                    raise RuntimeError(f"baseline program exited {proc.returncode}: {err[-400:]}")
                deadline.check(f"baseline program {variant} W={workers}")
                time.sleep(POLL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out = _rates(timeline, started, n)
        out["client_cpu_us_per_job"] = (_children_cpu() - cpu_before) / n * 1e6
        return out

    def baseline_drain(
        self, variant: str, workers: int, opts: baseline.Options, deadline: Deadline
    ) -> dict[str, float]:
        """One raw-SQL drain, run as the daemon's user so the same counters apply."""
        n = self.s.drain_jobs
        url = parse_database_url(self.b.daemon_url)
        deadline.check(f"baseline {variant}")
        baseline.prepare(url, variant, n, PARTITIONS)
        before = self.b.counters()
        cpu_before = _children_cpu()
        result = baseline.drain(
            url,
            variant,
            workers,
            n,
            opts,
            partitions=PARTITIONS,
            fill=False,
            timeout=max(5.0, deadline.remaining()),
        )
        out = {
            "rate": result.jobs_per_s,
            "client_statements": result.statements / n,
            "client_cpu_us_per_job": (_children_cpu() - cpu_before) / n * 1e6,
        }
        out.update(_per_job(before, self.b.counters(), n))
        out.setdefault("deadlocks", float(result.deadlocks))
        return out

    def baseline_series(
        self, label: str, variant: str, workers: int, opts: baseline.Options, deadline: Deadline
    ) -> float:
        runs = [
            self.baseline_drain(variant, workers, opts, deadline)
            for _ in range(self.s.baseline_repeats)
        ]
        runs.sort(key=lambda r: r["rate"])
        mid = runs[len(runs) // 2]
        self.fig(
            "drain",
            f"{label} W={workers}",
            mid["rate"],
            "jobs/s",
            note=f"median of {len(runs)}: {', '.join(_num(r['rate']) for r in runs)}; "
            + _cost_note(mid),
        )
        return mid["rate"]

    def drain(self, deadline: Deadline) -> None:
        n = self.s.drain_jobs
        mysql = isinstance(self.b, MySQLBackend)
        default = baseline.Options()
        for workers in (2, 4):
            runs = [
                self.forkq_drain(workers, deadline, f"drain-w{workers}-{i}")
                for i in range(self.s.drain_repeats)
            ]
            best = _median_run(runs)
            self.fig(
                "drain",
                f"forkq W={workers}, daemon start → last job gone",
                best["rate"],
                "jobs/s",
                target=None if mysql else (">=", 5000.0),
                note=f"median of {len(runs)}: {', '.join(_num(r['rate']) for r in runs)}; n={n:,}",
            )
            self.fig(
                "drain",
                f"forkq W={workers}, steady state (95% → 5% left)",
                best["steady"],
                "jobs/s",
                note=f"boot to first ack {best['boot']:.2f}s; " + _cost_note(best),
            )
            variant = "skip_locked" if mysql else "sqlite"
            programs = [
                self.baseline_program(variant, workers, deadline)
                for _ in range(self.s.baseline_repeats)
            ]
            program = _median_run(programs)
            self.fig(
                "drain",
                f"raw loop as a program W={workers}, launch → last row gone (baseline)",
                program["rate"],
                "jobs/s",
                note=f"median of {len(programs)}: {', '.join(_num(r['rate']) for r in programs)};"
                f" steady {_num(program['steady'])} jobs/s; first row gone after"
                f" {program['boot']:.2f}s; " + _cost_note(program),
            )
            target = (">=", 0.8) if mysql and workers == 4 else None
            self.fig(
                "drain",
                f"forkq / raw program W={workers}, both from launch",
                best["rate"] / program["rate"],
                "x",
                target=target,
            )
            self.fig(
                "drain",
                f"forkq / raw program W={workers}, both steady state",
                best["steady"] / program["steady"],
                "x",
            )
            if mysql:
                ref = self.baseline_series(
                    "raw SKIP LOCKED loop, clock from connected",
                    "skip_locked",
                    workers,
                    default,
                    deadline,
                )
                block = self.baseline_series(
                    f"raw seed-001 partition locks, K={PARTITIONS}",
                    "block",
                    workers,
                    default,
                    deadline,
                )
                fused = self.baseline_series(
                    "what-if: raw SKIP LOCKED, ack in next claim's tx",
                    "skip_locked",
                    workers,
                    replace(default, fused=True),
                    deadline,
                )
            else:
                ref = self.baseline_series(
                    "raw BEGIN IMMEDIATE/RETURNING loop, clock from connected",
                    "sqlite",
                    workers,
                    default,
                    deadline,
                )
                fused = self.baseline_series(
                    "what-if: raw loop, ack in next claim's tx",
                    "sqlite",
                    workers,
                    replace(default, fused=True),
                    deadline,
                )
            for kind in ("rate", "steady"):
                self.fig(
                    "drain",
                    f"forkq / raw loop clocked from connected W={workers}"
                    + (" (daemon start)" if kind == "rate" else " (steady state)"),
                    best[kind] / ref,
                    "x",
                )
            if mysql:
                self.fig("drain", f"partition locks / SKIP LOCKED W={workers}", block / ref, "x")
            self.fig("drain", f"what-if ack-in-claim / baseline W={workers}", fused / ref, "x")
        baseline.drop(parse_database_url(self.b.daemon_url))
        self.b.reset()

    # 3. latency -------------------------------------------------------------------------------

    def latency(self, deadline: Deadline) -> None:
        s = self.s
        self.b.reset()
        q = Queue(self.b.admin_url)
        enqueued: dict[int, float] = {}
        try:
            q.enqueue("bench.noop", {"warm": True}, delay=3600)  # connect outside the clock
            with Daemon(self.workdir, self.b.daemon_url, 2, "latency") as daemon:
                daemon.start()
                wait_for(daemon.all_idle, deadline, "two idle children")
                time.sleep(1.0)
                origin = time.monotonic()
                for i in range(s.latency_jobs):
                    pause = origin + i * s.latency_gap - time.monotonic()
                    if pause > 0:
                        time.sleep(pause)
                    t = time.time()
                    enqueued[q.enqueue("bench.stamp", {"i": i})] = t
                stamps: dict[int, float] = {}

                def all_stamped() -> bool:
                    daemon.check_alive()
                    if daemon.stamp_file.exists():
                        for line in daemon.stamp_file.read_text().splitlines():
                            job, _, when = line.partition(" ")
                            stamps[int(job)] = float(when)
                    return len(stamps) >= len(enqueued)

                wait_for(all_stamped, deadline, "every stamp", interval=0.1)
        finally:
            q.close()
        lat = sorted((stamps[j] - enqueued[j]) * 1000 for j in enqueued)
        pct = statistics.quantiles(lat, n=100, method="inclusive")
        note = f"n={len(lat)}, {s.latency_gap * 1000:.0f} ms apart, W=2"
        self.fig(
            "latency", "enqueue → handler start p50", pct[49], "ms", target=("<=", 50.0), note=note
        )
        self.fig("latency", "enqueue → handler start p95", pct[94], "ms")
        self.fig("latency", "enqueue → handler start p99", pct[98], "ms", target=("<=", 150.0))
        self.fig("latency", "enqueue → handler start max", lat[-1], "ms")
        self.b.reset()

    # 4. idle cost -----------------------------------------------------------------------------

    def idle(self, deadline: Deadline) -> None:
        if self.b.queries() is None:
            self.fig(
                "idle", "queries/s while idle", None, "", note="needs MariaDB's USER_STATISTICS"
            )
            return
        for workers in self.s.idle_children:
            self.b.reset()
            with Daemon(self.workdir, self.b.daemon_url, workers, f"idle-w{workers}") as daemon:
                daemon.start()
                wait_for(daemon.all_idle, deadline, f"{workers} idle children")
                time.sleep(2.0)  # boot settles: registrations, first chores tick
                before, t0 = self.b.queries(), time.perf_counter()
                while time.perf_counter() - t0 < self.s.idle_window:
                    deadline.check("measuring idle queries")
                    daemon.check_alive()
                    time.sleep(0.2)
                after, t1 = self.b.queries(), time.perf_counter()
            assert before is not None and after is not None
            self.fig(
                "idle",
                f"queries/s, idle daemon, {workers} children",
                (after - before) / (t1 - t0),
                "q/s",
                target=("<=", 25.0),
                note=f"{after - before} statements in {t1 - t0:.1f}s",
            )
        self.b.reset()

    # 5. memory --------------------------------------------------------------------------------

    def memory(self, deadline: Deadline) -> None:
        n = self.s.memory_jobs
        self.b.reset()
        self.enqueue_jobs(n)
        # Children must live through the whole run to show growth: no recycling here.
        with Daemon(
            self.workdir, self.b.daemon_url, 4, "memory", max_jobs_per_child=10 * n
        ) as daemon:
            daemon.start()
            wait_for(
                lambda: daemon.check_alive() or self.b.count() == 0, deadline, f"{n} jobs done", 0.1
            )
            wait_for(daemon.all_idle, deadline, "idle children")
            time.sleep(0.5)
            master = daemon.master()
            rss = master.memory_info().rss / 2**20
            master_uss = master.memory_full_info().uss / 2**20
            kids = [
                (k.memory_full_info().uss / 2**20, k.memory_info().rss / 2**20)
                for k in daemon.children()
            ]
        uss = [u for u, _ in kids]
        self.fig(
            "memory",
            f"master RSS after {n:,} jobs (W=4)",
            rss,
            "MiB",
            target=("<=", 40.0),
            note=f"master USS {master_uss:.1f} MiB",
        )
        self.fig(
            "memory",
            "child USS, largest of 4",
            max(uss),
            "MiB",
            target=("<=", 15.0),
            note="USS "
            + ", ".join(f"{u:.1f}" for u in uss)
            + "; RSS "
            + ", ".join(f"{r:.1f}" for _, r in kids),
        )
        self.b.reset()

    # 6. scale ---------------------------------------------------------------------------------

    def scale(self, deadline: Deadline) -> None:
        """Claim cost on a 10k-row and a 1M-row table, batches alternating between the two
        (two databases), so a noisy neighbour slows both alike; then a ready backlog."""
        s = self.s
        self.b.reset()
        small_b = self.b.sibling("small")
        small_b.setup()
        owner = f"{socket.gethostname()}:{os.getpid()}:bench"
        claim_params = {"queue": QUEUE, "limit": 20, "now": time.time()}
        stores: list[Store] = []
        try:
            small_b.fill_finished(1, s.scale_small)
            filled = time.perf_counter()
            self.b.fill_finished(1, s.scale_large)
            self.report.notes.append(
                f"{self.b.name}: {s.scale_large:,} finished rows inserted in"
                f" {time.perf_counter() - filled:.1f}s"
            )
            deadline.check("filling finished rows")
            pairs = []
            for backend in (small_b, self.b):
                backend.add_ready(s.scale_ready)
                backend.settle(deadline)
                stores.append(open_store(backend.admin_url))
                pairs.append((backend, stores[-1], []))
            rounds = 10
            for _ in range(rounds):
                for backend, store, times in pairs:
                    times.extend(
                        self._batches(backend, store, owner, s.scale_batches // rounds, deadline)
                    )
            small, large = (self._summary(b, st, t) for b, st, t in pairs)
            self.plan(
                self.b,
                stores[1],
                f"claim_select, {s.scale_large:,} finished + {s.scale_ready:,} ready rows",
                "claim_select",
                claim_params,
            )
            self.plan(
                self.b,
                stores[1],
                f"due_queues (the master's idle poll), {s.scale_large:,} finished rows",
                "due_queues",
                {"queues": json.dumps([QUEUE]), "now": time.time()},
            )
            small_b.add_ready(s.scale_backlog - s.scale_ready)
            small_b.settle(deadline)
            backlog = self._summary(
                small_b,
                stores[0],
                self._batches(small_b, stores[0], owner, s.scale_backlog_batches, deadline),
            )
            self.plan(
                small_b,
                stores[0],
                f"claim_select, {s.scale_backlog:,} ready rows (a backlog)",
                "claim_select",
                claim_params,
            )
            due = {"queues": json.dumps([QUEUE]), "now": time.time()}  # due_queues binds JSON
            due_small = small_b.query_ms(stores[0].queries["due_queues"], due, 20)
            small_b.add_ready(s.scale_backlog * 3)  # a 4x larger backlog
            due_large = small_b.query_ms(stores[0].queries["due_queues"], due, 20)
            # A queue of its own: the rows deleted above must not be in the scanned ranges.
            small_b.add_ready(s.scale_backlog, delay=86400.0, queue="delayed")
            small_b.add_ready(5, queue="delayed")
            small_b.settle(deadline)
            self.plan(
                small_b,
                stores[0],
                f"claim_select, {s.scale_backlog:,} delayed + 5 due rows (the other hard case)",
                "claim_select",
                {**claim_params, "queue": "delayed"},
            )
        finally:
            for store in stores:
                store.close()
            small_b.teardown()
        self._scale_figures(small, large, backlog, due_small, due_large)
        self.b.reset()

    def _scale_figures(
        self,
        small: dict[str, float],
        large: dict[str, float],
        backlog: dict[str, float],
        due_small: float,
        due_large: float,
    ) -> None:
        s = self.s
        for size, r in ((s.scale_small, small), (s.scale_large, large)):
            self.fig(
                "scale",
                f"claim(20) + complete, {size:,} finished rows",
                r["median"],
                "ms/batch",
                note=f"mean {r['mean']:.2f}, p95 {r['p95']:.2f}; {s.scale_batches} batches,"
                f" {s.scale_ready:,} ready",
            )
        self.fig(
            "scale",
            f"claim cost ratio {s.scale_large:,} / {s.scale_small:,} finished (median)",
            large["median"] / small["median"],
            "x",
            target=("<=", 1.2),
            note=f"mean ratio {large['mean'] / small['mean']:.2f}; batches alternate between"
            " the two tables",
        )
        self.fig(
            "scale",
            f"claim query alone, {s.scale_large:,} / {s.scale_small:,} finished (median)",
            large["query"] / small["query"],
            "x",
            note=f"{small['query']:.2f} → {large['query']:.2f} ms; the claim's SELECT in a"
            " rolled-back transaction: no commit, no fsync",
        )
        self.fig(
            "scale",
            f"claim(20) + complete, {s.scale_backlog:,} ready backlog",
            backlog["median"],
            "ms/batch",
            note=f"{s.scale_backlog_batches} batches; claim query alone {backlog['query']:.2f} ms;"
            " not in the brief's targets",
        )
        self.fig(
            "scale",
            f"claim cost ratio {s.scale_backlog:,} / {s.scale_ready:,} ready (median)",
            backlog["median"] / small["median"],
            "x",
            note="the claim should not grow with the backlog either",
        )
        self.fig(
            "scale",
            f"due_queues (master's idle poll), {s.scale_backlog * 4:,} ready rows",
            due_large,
            "ms",
            note=f"{due_small:.2f} ms with {s.scale_backlog:,}; runs every poll_interval (50 ms)"
            " while a child is idle, e.g. when every ready job is delayed",
        )
        self.fig(
            "scale",
            f"store.stats() with {s.scale_large:,} rows",
            large["stats"],
            "ms",
            note=f"{small['stats']:.1f} ms with {s.scale_small:,}; the chores leader runs it"
            " every check_interval",
        )

    def plan(
        self, backend: Backend, store: Store, title: str, query: str, params: dict[str, Any]
    ) -> None:
        params = {**params, "now": time.time()}  # SQLite binds the clock: never a stale one
        self.report.plans[f"{backend.name}: {title}"] = backend.explain(store, query, params)

    def _batches(
        self, backend: Backend, store: Store, owner: str, batches: int, deadline: Deadline
    ) -> list[float]:
        """Milliseconds of `claim(20)` + `complete` per batch; the ready set is refilled."""
        times = []
        store.claim(QUEUE, owner, 1, 60)  # warm the connection and the plan
        for _ in range(batches):
            started = time.perf_counter()
            rows = store.claim(QUEUE, owner, 20, 60)
            store.complete(owner, [r.id for r in rows], "delete")
            times.append((time.perf_counter() - started) * 1000)
            if len(rows) != 20:
                raise RuntimeError(f"claimed {len(rows)} rows, expected 20")
            backend.add_ready(20)  # keep the ready set at its size (not timed)
            deadline.check("timing claims")
        return times

    def _summary(self, backend: Backend, store: Store, times: list[float]) -> dict[str, float]:
        started = time.perf_counter()
        store.stats()
        stats_ms = (time.perf_counter() - started) * 1000
        params = {"queue": QUEUE, "limit": 20, "now": time.time()}
        return {
            "median": statistics.median(times),
            "mean": statistics.fmean(times),
            "p95": statistics.quantiles(times, n=20)[18],
            "stats": stats_ms,
            "query": backend.query_ms(store.queries["claim_select"], params, 50),
        }


SECTIONS: dict[str, float] = {  # name -> hard deadline in seconds
    "enqueue": 90.0,
    "drain": 220.0,
    "latency": 45.0,
    "idle": 70.0,
    "memory": 60.0,
    "scale": 200.0,
    **scale.SECTIONS,
    **commands.SECTIONS,
}


def run_backend(
    backend: Backend, report: Report, settings: Settings, sections: list[str], budget: Deadline
) -> None:
    print(f"\n== {backend.name} ==", flush=True)
    # scale.py's sections bring their own databases: alone, they leave the shared server be.
    shared = any(name not in scale.SECTIONS for name in sections)
    try:
        if shared:
            backend.setup()
    except Exception as exc:
        with contextlib.suppress(Exception):
            backend.teardown()
        report.add(
            Figure(
                backend.name,
                "setup",
                "database set-up",
                None,
                "",
                error=f"{type(exc).__name__}: {exc}",
            )
        )
        return
    try:
        if shared:
            report.machine.update(backend.server())
        with tempfile.TemporaryDirectory(prefix=f"forkq-bench-{backend.name}-") as tmp:
            bench = Bench(backend, report, settings, Path(tmp))
            for name in sections:
                limit = min(SECTIONS[name], budget.remaining())
                if limit < 10:
                    report.add(
                        Figure(backend.name, name, "(skipped)", None, "", error="time budget spent")
                    )
                    continue
                started = time.monotonic()
                try:
                    section = scale.runner(bench, name) or commands.runner(bench, name)
                    (section or getattr(bench, name))(Deadline(limit))
                except Exception as exc:
                    report.add(
                        Figure(
                            backend.name,
                            name,
                            "(section failed)",
                            None,
                            "",
                            error=f"{type(exc).__name__}: {exc}"[:300],
                        )
                    )
                    if shared:
                        with contextlib.suppress(Exception):
                            backend.reset()
                print(f"  -- {name}: {time.monotonic() - started:.1f}s", flush=True)
    finally:
        if shared:
            with contextlib.suppress(Exception):
                backend.teardown()
        scale.close()  # the private mariadbd of scale.py's sections, if one was started


# --- RESULTS.md -----------------------------------------------------------------------------


def machine_info() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "host": socket.gethostname(),
        "OS": platform.platform(),
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "RAM": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "Python": platform.python_version(),
        "PyMySQL": importlib.metadata.version("PyMySQL"),
    }


def fsync_probe(directory: Path, count: int = 100) -> float:
    """Median milliseconds of a 4 KiB write + fdatasync: what one durable commit costs here."""
    path = directory / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    times = []
    try:
        for i in range(count):
            os.pwrite(fd, b"x" * 4096, (i % 16) * 4096)
            started = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times) * 1000


def source_version() -> str:
    """The commit measured, and whether supervisor/ had uncommitted changes (read-only git)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "supervisor"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return head + (f" + {len(dirty)} uncommitted file(s) under supervisor/" if dirty else "")


def print_table(report: Report) -> None:
    rows = [
        (f.backend, f.section, f.name, f.shown_value(), f.shown_target(), f.verdict)
        for f in report.figures
    ]
    header = ("backend", "section", "figure", "value", "target", "result")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    verdicts = [f.verdict for f in report.figures]
    print(
        f"\n{verdicts.count('PASS')} PASS, {verdicts.count('MISS')} MISS, {verdicts.count('ERROR')} ERROR"
    )


def write_results(report: Report, started: dt.datetime, seconds: float, argv: list[str]) -> None:
    kept = ""
    if RESULTS.exists():
        text = RESULTS.read_text(encoding="utf-8")
        if PROFILE_HEADING in text:
            kept = text[text.index(PROFILE_HEADING) :]
    if not kept:
        kept = f'{PROFILE_HEADING}\n\n(not written yet: see benchmarks/README.md, "Profiling")\n'
    out = [
        "# forkq benchmark results",
        "",
        "Written by `benchmarks/run.py` (everything above the Profile section; that section is",
        "hand-written and kept across runs). Targets come from the benchmark brief.",
        "",
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}, run took {seconds:.0f} s",
        "- Command: `make bench` (= `.venv/bin/python benchmarks/run.py"
        + (" " + " ".join(argv) if argv else "")
        + "`)",
    ]
    out += [f"- {k}: {v}" for k, v in report.machine.items()]
    out += [
        "",
        "## Figures",
        "",
        "| backend | section | figure | value | target | result | note |",
        "|---|---|---|---:|---|---|---|",
    ]
    for f in report.figures:
        out.append(
            f"| {f.backend} | {f.section} | {f.name} | {f.shown_value()} | {f.shown_target()} | {f.verdict} | {f.note.replace('|', '/')} |"
        )
    verdicts = [f.verdict for f in report.figures]
    out += [
        "",
        f"{verdicts.count('PASS')} PASS, {verdicts.count('MISS')} MISS, {verdicts.count('ERROR')} ERROR.",
        "",
    ]
    out += ["## How each figure is measured", "", *METHOD, ""]
    if report.notes:
        out += ["Notes from this run:", ""] + [f"- {n}" for n in report.notes] + [""]
    if report.plans:
        out += ["## Query plans", ""]
        for title, plan in report.plans.items():
            out += [f"### {title}", "", "```", plan, "```", ""]
    out += ["## Reproduce", "", *REPRODUCE, ""]
    RESULTS.write_text("\n".join(out) + "\n" + kept, encoding="utf-8")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


METHOD = [
    "- **enqueue**: `Queue.enqueue` in a loop, each call its own commit (fsync on both backends:"
    " innodb_flush_log_at_trx_commit=1, SQLite synchronous=FULL); the baseline is a driver loop of"
    " `INSERT INTO forkq_jobs (queue, handler, payload) VALUES (...)` in autocommit on the same table"
    " (SQLite: forkq's pragmas). `enqueue_many` gets lists of 1,000 dicts.",
    "- **drain**: N `bench.noop` jobs are enqueued, then `python -m supervisor run -c cfg` starts"
    " (one pool, W children, claim_batch 20, default max_jobs_per_child 1000, JSON logs to a file);"
    " the bench polls `COUNT(*)` every 10 ms. *Daemon start* = N / (last job gone - Popen); *steady"
    " state* = 90% of N / (time from 95% left to 5% left), which leaves out interpreter start,"
    " imports and forks. The daemon is stopped with SIGTERM afterwards (not timed); three runs,"
    " the median kept. *Raw loop as a program* (the baseline of the target ratio) runs"
    " `python benchmarks/baseline.py` on the same pre-filled rows and is timed exactly like the"
    " daemon: from Popen, by the same poller, median of three. The other raw baselines"
    " (benchmarks/baseline.py in-process) start their clock when every process is connected."
    " *Statements per job* come from MariaDB's USER_STATISTICS for the daemon's own user"
    " (SELECT + UPDATE + OTHER commands, BEGIN/COMMIT included; boot included).",
    "- **latency**: an idle daemon (W=2, default poll_interval 50 ms); the bench enqueues one job"
    " every 20 ms and notes `time.time()` just before each `enqueue`; `bench.stamp` appends"
    " `job.id time.time()` as its first act. Latency = stamp - enqueue time.",
    "- **idle**: MariaDB `SET GLOBAL userstat = 1`; the daemon connects as user `forkq_bench`;"
    " SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS of that user over the window, which"
    " starts once all children report idle plus 2 s. The window is 31 s, not 10 s: idle"
    " children re-check the queue on their own every 30 s (IDLE_RECHECK), and a shorter"
    " window would leave exactly the per-child share out.",
    "- **memory**: 10,000 jobs drained by W=4 (children not recycled), then psutil"
    " `memory_info().rss` of the master and `memory_full_info().uss` of each child.",
    "- **scale**: finished rows (`done`, one in ten `dead`, `finished_at` set) in the same"
    " queue, plus 1,000 ready jobs: 10k in a second database (`<name>_small`, SQLite: a"
    " second file), 1M in the bench database; `store.claim(queue, owner, 20, 60)` +"
    " `store.complete(...)` timed per batch, the two databases taking turns in ten rounds so"
    " a noisy neighbour slows both alike, the ready set refilled after each batch (not"
    " timed). The median per batch is the figure (commit jitter dominates the mean). The"
    " backlog and `due_queues` figures use the small database with 50k / 200k ready rows.",
    *scale.METHOD,
]

REPRODUCE = [
    "```sh",
    "make bench                                   # = .venv/bin/python benchmarks/run.py",
    "FORKQ_BENCH_MYSQL_URL=mysql://root@127.0.0.1:3306/forkq_bench make bench",
    ".venv/bin/python benchmarks/run.py --backends mariadb --sections drain --no-write",
    ".venv/bin/python benchmarks/baseline.py --variant block --workers 4 --jobs 5000",
    ".venv/bin/python benchmarks/run.py --profile   # cProfile of master and children during a drain",
    "```",
    "",
    "The MariaDB user running the bench needs CREATE/DROP DATABASE, CREATE USER and SUPER (for"
    " `SET GLOBAL userstat`, restored afterwards).",
    "",
    *scale.REPRODUCE,
]


# --- the lab: profiles and what-if patches -------------------------------------------------

# Runs `forkq` with cProfile in the master and each child (FORKQ_BENCH_PROFILE_DIR) and/or
# with what-if patches (FORKQ_BENCH_PATCHES), to measure a proposed change before anyone
# makes it in supervisor/. Each patch is the smallest monkeypatch that behaves like the
# proposal; see benchmarks/README.md.
LAB_WRAPPER = r"""
import cProfile, functools, os, sys, time
sys.argv = ["forkq"] + sys.argv[1:]
PROFILE_DIR = os.environ.get("FORKQ_BENCH_PROFILE_DIR", "")
PATCHES = set(filter(None, os.environ.get("FORKQ_BENCH_PATCHES", "").split(",")))
import supervisor.daemon.child as child
import supervisor.daemon.master as master
import supervisor.work.worker as worker

if "oldlease" in PATCHES:  # as in commit c4bbecb: every job extended every held lease
    def _ensure_lease_old(self, row):
        need = self.job_timeout(row) + worker.LEASE_MARGIN
        if time.monotonic() + need > self._lease_until:
            self.store.extend_leases(self.owner, [r.id for r in self.held], need)
            self._lease_until = time.monotonic() + need
    worker.Worker._ensure_lease = _ensure_lease_old

if "lease" in PATCHES:  # extend leases only when the lease would not outlive the job
    def _ensure_lease(self, row):
        timeout = self.job_timeout(row)
        if time.monotonic() + timeout + worker.LEASE_MARGIN / 2 > self._lease_until:
            need = timeout + worker.LEASE_MARGIN
            self.store.extend_leases(self.owner, [r.id for r in self.held], need)
            self._lease_until = time.monotonic() + need
    worker.Worker._ensure_lease = _ensure_lease

if PATCHES & {"claimidx", "noclaimidx"}:  # claim_select with / without the index hint
    from supervisor.store import mysql as _m, sqlite as _s
    for _q, _hint in ((_m.QUERIES, "FORCE INDEX (forkq_jobs_claim)"),
                      (_s.QUERIES, "INDEXED BY forkq_jobs_claim")):
        _q["claim_select"] = _q["claim_select"].replace(" " + _hint, "", 1)
        if "claimidx" in PATCHES:
            _q["claim_select"] = _q["claim_select"].replace(
                "FROM forkq_jobs", "FROM forkq_jobs " + _hint, 1)

if "nossl" in PATCHES:  # no TLS context per connection (the server has no TLS here anyway)
    import pymysql
    pymysql.connect = functools.partial(pymysql.connect, ssl_disabled=True)

if "quiet" in PATCHES:  # no per-job log line (measures what the line costs)
    import supervisor.logs as logs
    _setup = logs.setup
    logs.setup = lambda level="info", json_lines=None: _setup("warning", json_lines)

if "notitle" in PATCHES:  # no setproctitle per job
    child.set_title = lambda title: None

if PROFILE_DIR:
    def _profiled(func, kind):
        def run(*args, **kwargs):
            prof = cProfile.Profile()
            prof.enable()
            try:
                return func(*args, **kwargs)
            finally:
                prof.disable()
                prof.dump_stats(os.path.join(PROFILE_DIR, f"{kind}-{os.getpid()}.prof"))
        return run
    child.child_main = _profiled(child.child_main, "child")
    master.Master.run = _profiled(master.Master.run, "master")

from supervisor.cli.parser import main
raise SystemExit(main())
"""
PATCH_NAMES = ("oldlease", "lease", "claimidx", "noclaimidx", "nossl", "quiet", "notitle")


def lab(args: argparse.Namespace) -> int:
    """What-if drains (--lab "none;claimidx;claimidx,nossl") and cProfile runs (--profile).

    Repeats go round all patch sets in turn, so a noisy neighbour hits each set alike;
    the median run of each set is shown.
    """
    name = args.lab_backend
    backend: Backend = (
        MySQLBackend(args.mysql_url)
        if name == "mariadb"
        else SQLiteBackend(Path(tempfile.mkdtemp()))
    )
    patch_sets = [p.strip() for p in (args.lab or "none").split(";") if p.strip()]
    for patches in patch_sets:
        unknown = set(patches.split(",")) - {*PATCH_NAMES, "none"}
        if unknown:
            raise SystemExit(f"unknown patches {sorted(unknown)}; known: {', '.join(PATCH_NAMES)}")
    workers_list = [int(w) for w in args.lab_workers.split(",")]
    backend.setup()
    report = Report()
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="forkq-lab-") as tmp:
            workdir = Path(tmp)
            wrapper = workdir / "lab_forkq.py"
            wrapper.write_text(LAB_WRAPPER, encoding="utf-8")
            bench = Bench(backend, report, Settings(drain_jobs=args.lab_jobs), workdir)
            bench.daemon_command = [sys.executable, str(wrapper)]
            for i in range(args.lab_repeats):
                for patches in patch_sets:
                    for workers in workers_list:
                        env = {"FORKQ_BENCH_PATCHES": "" if patches == "none" else patches}
                        profile_dir = workdir / f"prof-{patches}-{workers}-{i}"
                        if args.profile:
                            profile_dir.mkdir()
                            env["FORKQ_BENCH_PROFILE_DIR"] = str(profile_dir)
                        bench.daemon_env = env
                        run = bench.forkq_drain(workers, Deadline(300), f"lab-{workers}-{i}")
                        runs.setdefault((patches, workers), []).append(run)
                        print(f"  {patches} W={workers}: {run['rate']:,.0f} jobs/s", flush=True)
                        if args.profile:
                            print_profile(profile_dir, args.profile_top)
    finally:
        backend.teardown()
    for (patches, workers), series in runs.items():
        series.sort(key=lambda r: r["rate"])
        mid = series[len(series) // 2]
        tag = f"patches={patches}" + (" (cProfile on)" if args.profile else "")
        note = f"median of {len(series)}: " + ", ".join(_num(r["rate"]) for r in series)
        report.add(
            Figure(
                backend.name,
                "lab",
                f"{tag} W={workers}, daemon start",
                mid["rate"],
                "jobs/s",
                note=note,
            )
        )
        report.add(
            Figure(
                backend.name,
                "lab",
                f"{tag} W={workers}, steady state",
                mid["steady"],
                "jobs/s",
                note=_cost_note(mid),
            )
        )
    return 0


def print_profile(directory: Path, top: int) -> None:
    import pstats

    for kind in ("child", "master"):
        files = sorted(str(p) for p in directory.glob(f"{kind}-*.prof"))
        if not files:
            continue
        stats = pstats.Stats(*files)
        stats.strip_dirs()
        print(f"\n===== {kind} ({len(files)} process(es)): top by cumulative time =====")
        stats.sort_stats("cumulative").print_stats(top)
        print(f"\n===== {kind}: top by own time =====")
        stats.sort_stats("tottime").print_stats(top)


# --- main -----------------------------------------------------------------------------------


def compile_bytecode() -> None:
    """Write forkq's and the handlers' bytecode, as a wheel install ships it.

    An editable install under PYTHONDONTWRITEBYTECODE=1 (set on these machines) never
    caches it, so every daemon launch would compile ~30 modules: ~95 ms of CPU that a
    production install does not spend, counted against forkq in every from-launch figure.
    """
    for directory in (REPO / "supervisor", BENCH_DIR):
        compileall.compile_dir(directory, quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(description="forkq benchmarks (see benchmarks/README.md)")
    parser.add_argument("--backends", default="mariadb,sqlite", help="mariadb,sqlite")
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=",".join(SECTIONS)
        + "; "
        + ", ".join(f"{k} = {','.join(v)}" for k, v in scale.GROUPS.items()),
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for trying the script")
    parser.add_argument("--no-write", action="store_true", help="do not write RESULTS.md")
    parser.add_argument("--idle-window", type=float, help="seconds (default 31)")
    lab_help = parser.add_argument_group("the lab (instead of the benchmarks)")
    lab_help.add_argument(
        "--lab",
        metavar="SETS",
        help='what-if drains, e.g. "none;lease;lease,nossl" (patches: '
        + ", ".join(PATCH_NAMES)
        + ")",
    )
    lab_help.add_argument("--profile", action="store_true", help="cProfile master and children")
    lab_help.add_argument("--lab-backend", default="mariadb", choices=("mariadb", "sqlite"))
    lab_help.add_argument("--lab-jobs", type=int, default=5000)
    lab_help.add_argument("--lab-workers", default="4", help="e.g. 2,4")
    lab_help.add_argument("--lab-repeats", type=int, default=1)
    lab_help.add_argument("--profile-top", type=int, default=30)
    args = parser.parse_args()
    args.mysql_url = os.environ.get("FORKQ_BENCH_MYSQL_URL", DEFAULT_MYSQL_URL)
    compile_bytecode()
    if args.lab or args.profile:
        return lab(args)
    sections = [x for s in args.sections.split(",") if s for x in scale.GROUPS.get(s, [s])]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown sections {unknown}")
    settings = Settings.quick() if args.quick else Settings()
    if args.idle_window:
        settings.idle_window = args.idle_window
    started_at = dt.datetime.now(dt.UTC)
    started = time.monotonic()
    budget = Deadline(TOTAL_BUDGET)
    report = Report(machine=machine_info())
    report.machine["forkq source"] = source_version()
    report.machine["fsync (4 KiB fdatasync, median) at start"] = (
        f"{fsync_probe(Path(tempfile.gettempdir())):.2f} ms"
    )
    report.machine["load average at start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        "forkq benchmarks — " + ", ".join(f"{k}: {v}" for k, v in report.machine.items()),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="forkq-bench-sqlite-") as sqlite_dir:
        for name in args.backends.split(","):
            backend: Backend = (
                MySQLBackend(args.mysql_url)
                if name == "mariadb"
                else SQLiteBackend(Path(sqlite_dir))
            )
            run_backend(backend, report, settings, sections, budget)
    seconds = time.monotonic() - started
    report.machine["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print_table(report)
    print(f"\ntotal {seconds:.0f}s")
    if not args.no_write:
        write_results(report, started_at, seconds, sys.argv[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
