"""The databases under test: MariaDB/MySQL (a database and a user of the bench's own on
FORKQ_BENCH_MYSQL_URL's server, dropped afterwards) and SQLite (a file in a temporary
directory); how the bench reaches each, how the daemon does, bulk fills, query plans and
the server-side counters of the daemon's user.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import sqlite3
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import baseline
from harness import BENCH_USER, QUEUE, Deadline

from supervisor.dburl import parse_database_url
from supervisor.store import Store, open_store

# The query changes proposed in RESULTS.md, shown beside the shipped ones in the plans.
MYSQL_CLAIM_HINT = "FORCE INDEX (forkq_jobs_limit)"  # forkq_jobs_claim until schema 19
SQLITE_CLAIM_HINT = "INDEXED BY forkq_jobs_claim"
MYSQL_DUE_QUEUES = """SELECT q.queue, TIMESTAMPDIFF(MICROSECOND, NOW(6),
       (SELECT j.run_at FROM forkq_jobs j WHERE j.status = 'ready' AND j.queue = q.queue
        ORDER BY j.run_at LIMIT 1)) AS wait_us
FROM JSON_TABLE(%(queues)s, '$[*]' COLUMNS (queue VARCHAR(64) PATH '$')) AS q"""
SQLITE_DUE_QUEUES = """SELECT q.value AS queue,
       CAST(((SELECT MIN(j.run_at) FROM forkq_jobs j
              WHERE j.status = 'ready' AND j.queue = q.value) - :now) * 1000000 AS INTEGER) AS wait_us
FROM json_each(:queues) AS q"""


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
    def settle(self, deadline: Deadline, history: int = 1000, dirty: bool = True) -> None: ...
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
        for table in (
            "forkq_jobs_archive",
            "forkq_processes",
            "forkq_locks",
            "forkq_alerts",
            "forkq_tenants",
        ):
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

    def settle(self, deadline: Deadline, history: int = 1000, dirty: bool = True) -> None:
        """Let InnoDB write back what a bulk insert left dirty (`dirty`: under 2% of the
        buffer pool; slow, the page cleaner's pace) and purge what a bulk delete left
        delete-marked (a range scan steps over those), so neither times our claims: until
        fewer than `history` transactions wait for the purge."""
        total = float(self._exec("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_total'")[0][1])
        until = time.monotonic() + min(30.0, max(0.0, deadline.remaining() - 60))
        while time.monotonic() < until:
            pages = float(
                self._exec("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'")[0][1]
            )
            waiting = self._exec(
                "SELECT count FROM information_schema.INNODB_METRICS"
                " WHERE name = 'trx_rseg_history_len'"
            )
            if (not dirty or pages < 0.02 * total) and (
                not waiting or int(waiting[0][0]) < history
            ):
                return
            time.sleep(0.1)

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
            "forkq_tenants",
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

    def settle(self, deadline: Deadline, history: int = 1000, dirty: bool = True) -> None:
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
