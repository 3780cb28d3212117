"""The store's core: its constants, what a backend (mysql.py, sqlite.py) provides, and
the plumbing every operation stands on (named statements, retried transactions, the
schema, producers' inserts). The operations are mixins over this core, one module a
concern, put together as `Store` in base.py.
"""

from __future__ import annotations

import json
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from supervisor.errors import SchemaError, TablesMissing, TransientDatabaseError, UsageError
from supervisor.models import Enqueued, NewJob
from supervisor.policy import clamp_delay
from supervisor.store.gates import SchemaGates
from supervisor.store.queries import upgrade_statements

T = TypeVar("T")

SCHEMA_VERSION = 19  # what `forkq schema apply` creates
# The oldest schema this code runs on: version 2 only dropped an index, version 3 only
# documents the `scheduled` status in a column comment, and without version 4's
# forkq_processes.node the rows this code writes have no node (see register_process).
OLDEST_SCHEMA_VERSION = 1
NODE_SCHEMA_VERSION = 4  # forkq_processes.node exists from this version on
RESULTS_SCHEMA_VERSION = 6  # forkq_results (task results of supervisor.contrib.django)
# forkq_limits, forkq_jobs.limit_wait and .snoozes: [limits] and counted snoozes need it.
LIMITS_SCHEMA_VERSION = 7
# forkq_jobs.group_key and .tenant, forkq_tenants: fair pools and jobs with a group_key need it.
FAIR_SCHEMA_VERSION = 8
# forkq_dependencies and forkq_jobs.deps: enqueue with depends_on needs it.
DEPS_SCHEMA_VERSION = 14
TIMING_SCHEMA_VERSION = 11  # forkq_handler_stats: per-handler timing (supervisor/timing.py)
# A job due later than this is stored `scheduled`, outside the claim's index range, and
# made `ready` this long before it is due (by the master's poll or `forkq work`), so a
# claim never walks the jobs waiting for later and is still on time to the microsecond.
SCHEDULE_AHEAD = 2.0
PROMOTE_BATCH = 500  # rows per promote / demote transaction
TRANSIENT_RETRIES = 6  # deadlocks and lock-wait timeouts are retried this many times
PURGE_CHUNK = 5000
STATS_CAP = 10_000  # stats() counts stop here unless the caller says otherwise
AHEAD_US = round(SCHEDULE_AHEAD * 1_000_000)
# A wait written by a worker ends this long before the backend's TIME_LIMIT: the server's
# clock, which computes it, may run ahead of ours.
TIME_LIMIT_MARGIN = 86400.0


# Told of each transaction run again after a lost race (a deadlock, a Galera
# certification conflict, a lock-wait timeout): observe/metrics.py counts them.
conflict_listeners: list[Callable[[], None]] = []


def micros(seconds: float) -> int:
    return max(0, round(seconds * 1_000_000))


class Seconds(float):
    """Epoch seconds of a datetime: MySQL binds them exactly (store/mysql_binds.py)."""


class StoreCore(SchemaGates, ABC):
    """What every operation stands on: what a backend provides, the plumbing that
    retries a transaction, the schema, and producers' inserts. One database connection
    (opened lazily, reopened after a fork or a loss)."""

    backend: str
    queries: dict[str, str]
    # The first second the backend's time columns cannot hold (None: no such limit).
    TIME_LIMIT: float | None = None
    # Does an UPDATE's row count include the rows it matched and left as they were (MySQL's
    # CLIENT.FOUND_ROWS, so also the rows UPDATE IGNORE skipped)? SQLite counts changes.
    counts_matched = False
    # The version whose columns the statements on forkq_jobs_limit, _tenant and _batch read:
    # MariaDB's read 18's ready_wait, ready_tenant, batch_status (MySQLStore); SQLite's none.
    indexed_columns_version = 0

    # --- what a backend provides -------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Close the connection politely (it is reopened on the next call)."""

    @abstractmethod
    def _execute(self, name: str, params: dict[str, Any]) -> int:
        """Run a named statement; return the rows it matched."""

    def _execute_last(self, name: str, params: dict[str, Any]) -> int:
        """`_execute` for the last statement of a transaction: a backend may send the
        COMMIT with it (MySQL)."""
        return self._execute(name, params)

    @abstractmethod
    def _fetchall(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Run a named query; return rows as dicts."""

    @abstractmethod
    def _transaction(self) -> Any:
        """A context manager: one transaction on this store's connection (a write lock on SQLite)."""

    @abstractmethod
    def _ids(self, ids: Sequence[int | str]) -> Any:
        """Bind a list of ids or names for `IN`."""

    @abstractmethod
    def _schema_statements(self) -> list[str]:
        """The DDL of this backend."""

    @abstractmethod
    def _run_ddl(self, statements: list[str]) -> None:
        """Run DDL statements outside a transaction."""

    @abstractmethod
    def insert_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """Insert jobs in as few round trips as the server allows; ids in input order."""

    @abstractmethod
    def _insert_job(self, params: dict[str, Any]) -> Enqueued:
        """Insert one job on this store's connection (inside an open transaction or not)."""

    @abstractmethod
    def insert_on(self, connection: Any, job: NewJob) -> Enqueued:
        """Insert one job on the caller's own connection, inside the caller's transaction."""

    @abstractmethod
    def _fetchall_on(
        self, connection: Any, name: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Run a named query on the caller's own connection; rows as dicts. As with
        insert_on, the caller's transaction and the driver's own errors."""

    @abstractmethod
    def _execute_on(self, connection: Any, name: str, params: dict[str, Any]) -> int:
        """Run a named statement on the caller's own connection; the rows it matched."""

    # --- plumbing ------------------------------------------------------------------------

    def bounded_wait(self, delay: float) -> float:
        """A wait from now as this backend can hold it, so an outcome is always written:
        at most a year (policy.clamp_delay; inf and nan included), and where time columns
        end (MariaDB's TIMESTAMP in January 2038) a day before that end. A job whose wait
        would reach past it runs then, and waits again if it must."""
        seconds = clamp_delay(delay)
        if self.TIME_LIMIT is not None:
            seconds = max(0.0, min(seconds, self.TIME_LIMIT - TIME_LIMIT_MARGIN - time.time()))
        return seconds

    def _params(self, **values: Any) -> dict[str, Any]:
        values.setdefault("now", time.time())
        return values

    def _retrying(self, operation: Callable[[], T]) -> T:
        """Retry a whole transaction on deadlock / lock-wait timeout (it was rolled back).

        The first retry is immediate: the victim's locks are gone and the winner has
        moved on; a nap there idles a worker for the time of a dozen claims.
        """
        for attempt in range(TRANSIENT_RETRIES):
            try:
                return operation()
            except TransientDatabaseError:
                if attempt == TRANSIENT_RETRIES - 1:
                    raise
                for listener in conflict_listeners:
                    listener()
                if attempt:
                    time.sleep(random.uniform(0.001, 0.005) * attempt)
        raise AssertionError("unreachable")

    def _run(self, query: str, /, **values: Any) -> int:
        return self._retrying(lambda: self._execute(query, self._params(**values)))

    def _rows(self, query: str, /, **values: Any) -> list[dict[str, Any]]:
        return self._retrying(lambda: self._fetchall(query, self._params(**values)))

    def _in_chunks(self, query: str, /, **values: Any) -> int:
        """Run a DELETE or UPDATE with `LIMIT :limit` until a chunk changes fewer rows than
        PURGE_CHUNK; how many rows it changed in all. Each chunk is a short transaction
        of its own, so a big purge never holds many locks at once."""
        total = 0
        while True:
            changed = self._run(query, limit=PURGE_CHUNK, **values)
            total += changed
            if changed < PURGE_CHUNK:
                return total

    @contextmanager
    def _tx(self) -> Iterator[None]:
        with self._transaction():
            yield

    # --- the seam flow control speaks through (store/limits/) ----------------------------
    # Its claims write the jobs table under rules of their own, as named statements in
    # transactions they shape: they use these, never the plumbing's private names.

    def transaction(self) -> AbstractContextManager[None]:
        return self._tx()

    def statement(self, name: str, params: dict[str, Any]) -> int:
        return self._execute(name, params)

    def query(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self._fetchall(name, params)

    def bind(self, **values: Any) -> dict[str, Any]:
        return self._params(**values)

    def bind_ids(self, ids: Sequence[int | str]) -> Any:
        return self._ids(ids)

    def retrying(self, operation: Callable[[], T]) -> T:
        return self._retrying(operation)

    def run(self, query: str, /, **values: Any) -> int:
        return self._run(query, **values)

    def rows(self, query: str, /, **values: Any) -> list[dict[str, Any]]:
        return self._rows(query, **values)

    def in_chunks(self, query: str, /, **values: Any) -> int:
        return self._in_chunks(query, **values)

    # --- schema --------------------------------------------------------------------------

    def server_version(self) -> str:
        return str(self._rows("server_version")[0]["version"])

    def connection_database(self, connection: Any) -> str | None:
        """The database (MySQL) or file (SQLite) a caller's connection is to: the router
        (routing.py) checks a `connection=` enqueue goes where its queue lives."""
        rows = self._fetchall_on(connection, "connection_database", {})
        return str(rows[0]["name"]) if rows and rows[0]["name"] else None

    def schema_version(self) -> int | None:
        """The applied version, or None when forkq's tables do not exist yet."""
        try:
            rows = self._rows("schema_version")
        except Exception as exc:  # a missing table is a driver-specific error
            if (
                isinstance(exc, TablesMissing)  # an SQLite file not made yet, among others
                or "forkq_schema" in str(exc)
                or "no such table" in str(exc)
                or "doesn't exist" in str(exc)
            ):
                return None
            raise
        return int(rows[0]["version"]) if rows else None

    def apply_schema(self) -> int:
        """Run upgrades from an older version, create what is missing, record the version.

        Upgrades first: each creates what its version adds, and the DDL may index a column
        an older table does not have yet (SQLite's forkq_jobs_limit, outside its table).
        """
        current = self.schema_version()
        if current is not None:
            self._run_ddl(upgrade_statements(self.queries, current))
        self._run_ddl(self._schema_statements())
        self._run("set_schema_version", version=SCHEMA_VERSION)
        self.schema_checked, self._gates = SCHEMA_VERSION, None
        return SCHEMA_VERSION

    def require_schema(self) -> int:
        """The applied version, if this code can run on it; SchemaError if not."""
        version = self.schema_version()
        if version is None:
            raise SchemaError(self.missing_tables())
        if version < OLDEST_SCHEMA_VERSION:
            raise SchemaError(
                f"schema version {version} is older than {OLDEST_SCHEMA_VERSION}:"
                " run `forkq schema apply`"
            )
        return version

    def missing_tables(self) -> str:
        """What to say when forkq's tables are not there (SQLite: when the file is not)."""
        return "forkq tables are missing: run `forkq schema apply`"

    def require_latest_schema(self) -> int:
        """The applied version, if it is this code's own: the daemons (`forkq run`, `forkq
        work`) claim and run the chores with statements that read what the latest version
        adds (SPEC: the latest only). SchemaError naming `forkq schema apply` if not."""
        version = self.require_schema()
        if version < SCHEMA_VERSION:
            raise SchemaError(
                f"the database has forkq schema version {version}, this forkq needs"
                f" {SCHEMA_VERSION}: run `forkq schema apply`"
            )
        self.schema_checked = version  # every gate answers from it from now on
        return version

    def db_now(self) -> float:
        return float(self._rows("db_now")[0]["now"])

    # --- producers -----------------------------------------------------------------------

    @classmethod
    def job_params(cls, job: NewJob) -> dict[str, Any]:
        run_at = None if job.run_at is None else Seconds(job.run_at.timestamp())
        if run_at is not None and run_at < 1.0:  # MySQL's TIMESTAMP starts 1 s into 1970
            raise UsageError("run_at must fall after 1970-01-01 00:00:00 UTC")
        if cls.TIME_LIMIT is not None:
            due = run_at if run_at is not None else time.time() + job.delay
            if due >= cls.TIME_LIMIT:  # the server would store NULL or refuse: say so first
                limit = datetime.fromtimestamp(cls.TIME_LIMIT, UTC).strftime("%Y-%m-%d %H:%M:%S")
                raise UsageError(f"run_at and delay must fall before {limit} UTC on {cls.backend}")
        return {
            "queue": job.queue,
            "handler": job.handler,
            "payload": job.payload_json,
            "priority": job.priority,
            "run_at": run_at,
            "delay_us": micros(job.delay),
            "unique_key": job.unique_key,
            "max_attempts": job.max_attempts,
            "limit_key": job.limit_key,
            "group_key": job.group_key,
            "tags": json.dumps(list(job.tags), separators=(",", ":")) if job.tags else None,
            "unique_for": job.unique_for,
            "unique_while": job.unique_while,
            "replace": int(job.on_conflict != "skip"),
            "debounce": int(job.on_conflict == "debounce"),
            "debounce_max_us": None if job.debounce_max is None else micros(job.debounce_max),
            "batch_id": job.batch_id,
            "ahead_us": AHEAD_US,
        }

    @staticmethod
    def insert_query(params: Mapping[str, Any]) -> str:
        """The named INSERT for one job: deduplicating only when it has a unique key, and
        computing run_at only when it is not "now" (each costs the server per insert).
        Only a job with a limit_key names that column (schema 5), so a producer on an
        older schema still enqueues every other job; likewise group_key (schema 8) and tags
        (schema 9: a tagged job names group_key too). A job with a unique key names every
        column (schema 10: its window and scope) and says whether it conflicted; a job of
        q.batch() (schema 13) has none."""
        if params["unique_key"] is not None:
            return "insert_job_unique"
        if params.get("batch_id") is not None:
            return "insert_job_batched"
        if params.get("tags") is not None:
            return "insert_job_tagged"
        if params.get("group_key") is not None:
            return "insert_job_grouped"
        if params.get("limit_key") is not None:
            return "insert_job_keyed"
        if params["run_at"] is None and not params["delay_us"]:
            return "insert_job"
        return "insert_job_at"

    def enqueue(self, job: NewJob) -> Enqueued:
        """One job, one statement: its own transaction (autocommit), no BEGIN / COMMIT."""
        return self._retrying(lambda: self._insert_job(self._params(**self.job_params(job))))
