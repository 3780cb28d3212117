"""The store: every business operation on the database, written once over named queries.

A backend (mysql.py, sqlite.py) supplies the connection, the transaction, the
translation of driver errors into forkq's own, and how values are bound; this
class holds the operations. Callers never see a cursor.

Every state change of a claimed job repeats its precondition (`status = 'running'
AND locked_by = owner`) and returns how many rows it changed, so a worker whose
lease was taken over never overwrites the new holder.
"""

from __future__ import annotations

import json
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from supervisor.errors import DuplicateKey, SchemaError, TransientDatabaseError
from supervisor.models import (
    CancelResult,
    JobListing,
    JobRow,
    JobState,
    LockRow,
    NewJob,
    ProcessRow,
    QueueStats,
    QueueTimes,
    Throughput,
    utc,
)

T = TypeVar("T")

SCHEMA_VERSION = 7  # what `forkq schema apply` creates
# The oldest schema this code runs on: version 2 only dropped an index, version 3 only
# documents the `scheduled` status in a column comment, and without version 4's
# forkq_processes.node the rows this code writes have no node (see register_process).
OLDEST_SCHEMA_VERSION = 1
NODE_SCHEMA_VERSION = 4  # forkq_processes.node exists from this version on
RESULTS_SCHEMA_VERSION = 6  # forkq_results (task results of supervisor.contrib.django)
# forkq_limits, forkq_jobs.limit_wait and .snoozes: [limits] and counted snoozes need it.
LIMITS_SCHEMA_VERSION = 7
# A job due later than this is stored `scheduled`, outside the claim's index range, and
# made `ready` this long before it is due (by the master's poll or `forkq work`), so a
# claim never walks the jobs waiting for later and is still on time to the microsecond.
SCHEDULE_AHEAD = 2.0
PROMOTE_BATCH = 500  # rows per promote / demote transaction
TRANSIENT_RETRIES = 6  # deadlocks and lock-wait timeouts are retried this many times
PURGE_CHUNK = 5000
STATS_CAP = 10_000  # stats() counts stop here unless the caller says otherwise
AHEAD_US = round(SCHEDULE_AHEAD * 1_000_000)


def load_queries(path: Path) -> dict[str, str]:
    """Parse `-- name: x` blocks into {name: sql}; comment lines before a name are dropped."""
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("-- name:"):
            if name:
                queries[name] = _finish(lines)
            name, lines = line.split(":", 1)[1].strip(), []
        elif name is not None:
            lines.append(line)
    if name:
        queries[name] = _finish(lines)
    return queries


def _finish(lines: list[str]) -> str:
    """The statement without its full-line comments (they document the file, not the query)."""
    code = [line for line in lines if not line.lstrip().startswith("--")]
    return "\n".join(code).strip().rstrip(";").strip()


def split_script(text: str) -> list[str]:
    """Split a DDL script on `;` at line ends; comments are dropped (none contain `;`)."""
    body = "\n".join(line for line in text.splitlines() if not line.strip().startswith("--"))
    return [part.strip() for part in body.split(";\n") if part.strip().rstrip(";").strip()]


UPGRADE_PREFIX = "upgrade_to_"


def upgrades(queries: Mapping[str, str]) -> dict[int, list[str]]:
    """{N: the statements that take version N-1 to N}, from the `upgrade_to_N` queries.

    An upgrade may hold several statements, one per line ending in `;`; each records
    its own version last, so a script stopped half-way says how far it got.
    """
    return {
        int(name[len(UPGRADE_PREFIX) :]): [part.rstrip(";").strip() for part in split_script(sql)]
        for name, sql in queries.items()
        if name.startswith(UPGRADE_PREFIX)
    }


def upgrade_statements(queries: Mapping[str, str], from_version: int) -> list[str]:
    """Every statement, in order, that takes a database at `from_version` to the latest."""
    return [
        statement
        for version, statements in sorted(upgrades(queries).items())
        if version > from_version
        for statement in statements
    ]


def micros(seconds: float) -> int:
    return max(0, round(seconds * 1_000_000))


def epoch(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


class Store(ABC):
    """One database connection (opened lazily, reopened after a fork or a loss)."""

    backend: str
    queries: dict[str, str]
    _node_column: bool | None = None  # does forkq_processes.node exist? (asked once)
    _results_table: bool | None = None  # does forkq_results exist? (asked once)
    _limits_schema: bool | None = None  # is the schema version 7 or later? (asked once)

    # --- what a backend provides -------------------------------------------------------

    @abstractmethod
    def close(self) -> None:
        """Close the connection politely (it is reopened on the next call)."""

    @abstractmethod
    def _execute(self, name: str, params: dict[str, Any]) -> int:
        """Run a named statement; return the rows it matched."""

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
    def insert_many(self, jobs: Sequence[NewJob]) -> list[int]:
        """Insert jobs in as few round trips as the server allows; ids in input order."""

    @abstractmethod
    def _insert_job(self, params: dict[str, Any]) -> int:
        """Insert one job on this store's connection (inside an open transaction or not)."""

    @abstractmethod
    def insert_on(self, connection: Any, job: NewJob) -> int:
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
                if attempt:
                    time.sleep(random.uniform(0.001, 0.005) * attempt)
        raise AssertionError("unreachable")

    def _run(self, query: str, /, **values: Any) -> int:
        return self._retrying(lambda: self._execute(query, self._params(**values)))

    def _rows(self, query: str, /, **values: Any) -> list[dict[str, Any]]:
        return self._retrying(lambda: self._fetchall(query, self._params(**values)))

    @contextmanager
    def _tx(self) -> Iterator[None]:
        with self._transaction():
            yield

    # --- schema --------------------------------------------------------------------------

    def server_version(self) -> str:
        return str(self._rows("server_version")[0]["version"])

    def schema_version(self) -> int | None:
        """The applied version, or None when forkq's tables do not exist yet."""
        try:
            rows = self._rows("schema_version")
        except Exception as exc:  # a missing table is a driver-specific error
            if (
                "forkq_schema" in str(exc)
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
        self._node_column = self._results_table = self._limits_schema = None
        return SCHEMA_VERSION

    def require_schema(self) -> int:
        """The applied version, if this code can run on it; SchemaError if not."""
        version = self.schema_version()
        if version is None:
            raise SchemaError("forkq tables are missing: run `forkq schema apply`")
        if version < OLDEST_SCHEMA_VERSION:
            raise SchemaError(
                f"schema version {version} is older than {OLDEST_SCHEMA_VERSION}:"
                " run `forkq schema apply`"
            )
        return version

    def db_now(self) -> float:
        return float(self._rows("db_now")[0]["now"])

    # --- producers -----------------------------------------------------------------------

    @staticmethod
    def job_params(job: NewJob) -> dict[str, Any]:
        return {
            "queue": job.queue,
            "handler": job.handler,
            "payload": job.payload_json,
            "priority": job.priority,
            "run_at": epoch(job.run_at),
            "delay_us": micros(job.delay),
            "unique_key": job.unique_key,
            "max_attempts": job.max_attempts,
            "limit_key": job.limit_key,
            "ahead_us": AHEAD_US,
        }

    @staticmethod
    def insert_query(params: Mapping[str, Any]) -> str:
        """The named INSERT for one job: deduplicating only when it has a unique key, and
        computing run_at only when it is not "now" (each costs the server per insert).
        Only a job with a limit_key names that column (schema 5), so a producer on an
        older schema still enqueues every other job."""
        if params.get("limit_key") is not None:
            return "insert_job_keyed"
        if params["unique_key"] is not None:
            return "insert_job_unique"
        if params["run_at"] is None and not params["delay_us"]:
            return "insert_job"
        return "insert_job_at"

    def enqueue(self, job: NewJob) -> int:
        """One job, one statement: its own transaction (autocommit), no BEGIN / COMMIT."""
        return self._retrying(lambda: self._insert_job(self._params(**self.job_params(job))))

    # --- workers -------------------------------------------------------------------------

    def claim(self, queue: str, owner: str, limit: int, lease: float) -> list[JobRow]:
        """Take up to `limit` due jobs of `queue` under a lease, in priority / run_at / id order."""
        return self.complete_and_claim({}, queue, owner, limit, lease)[0]

    def complete_and_claim(
        self,
        done: Mapping[str, Sequence[int]],
        queue: str,
        owner: str,
        limit: int,
        lease: float,
    ) -> tuple[list[JobRow], int]:
        """Record the previous batch's successes and claim the next batch in one transaction.

        `done` is {on_success mode: ids}. One commit (one fsync, one SQLite write lock)
        per batch instead of two. Returns the claimed jobs and how many successes were
        recorded (fewer than given: leases were taken over).
        """

        def attempt() -> tuple[list[JobRow], int]:
            with self._tx():
                completed = sum(
                    self._complete(owner, ids, mode) for mode, ids in done.items() if ids
                )
                rows = self._fetchall("claim_select", self._params(queue=queue, limit=limit))
                if rows:
                    ids = [row["id"] for row in rows]
                    params = self._params(owner=owner, ids=self._ids(ids), lease_us=micros(lease))
                    self._execute("claim_update", params)
            return [_claimed(row, queue, owner) for row in rows], completed

        return self._retrying(attempt)

    def extend_leases(self, owner: str, ids: Sequence[int], lease: float) -> int:
        if not ids:
            return 0
        return self._run("extend_leases", owner=owner, ids=self._ids(ids), lease_us=micros(lease))

    def complete(self, owner: str, ids: Sequence[int], mode: str) -> int:
        """Record success of jobs this owner holds: delete, archive or keep them."""
        if not ids:
            return 0

        def attempt() -> int:
            with self._tx():
                return self._complete(owner, ids, mode)

        return self._retrying(attempt)

    def _complete(self, owner: str, ids: Sequence[int], mode: str) -> int:
        """Inside an open transaction (retried whole by the caller)."""
        params = self._params(owner=owner, ids=self._ids(ids))
        if mode == "keep":
            return self._execute("complete_keep", params)
        if mode == "archive":
            self._execute("complete_archive_copy", params)
        return self._execute("complete_delete", params)

    def fail(
        self,
        owner: str,
        job_id: int,
        error: str,
        *,
        dead: bool,
        delay: float = 0.0,
        max_attempts: int | None = None,
        only_expired: bool = False,
    ) -> bool:
        """Record a failed attempt: back to ready after `delay`, or dead. False if no longer held."""
        name = "fail_dead" if dead else "fail_retry"
        changed = self._run(
            name,
            status=JobState.SCHEDULED if delay > SCHEDULE_AHEAD else JobState.READY,
            owner=owner,
            id=job_id,
            error=error,
            delay_us=micros(delay),
            max_attempts=max_attempts,
            only_expired=1 if only_expired else 0,
        )
        return changed == 1

    def snooze(
        self, owner: str, job_id: int, delay: float, max_snoozes: int, reason: str = "snoozed"
    ) -> str:
        """The handler raised Snooze(delay): back to ready (or scheduled) after `delay`, the
        claim's attempt given back and the snooze counted. "snoozed"; "dead" when the job
        had already snoozed `max_snoozes` times (so a bug cannot snooze forever unseen);
        "lost" when this owner no longer holds it. Needs schema 7 (snoozes_counted)."""
        changed = self._run(
            "snooze",
            status=JobState.SCHEDULED if delay > SCHEDULE_AHEAD else JobState.READY,
            owner=owner,
            id=job_id,
            delay_us=micros(delay),
            max_snoozes=max_snoozes,
        )
        if changed == 1:
            return "snoozed"
        error = (
            f"snoozed {max_snoozes} times, its handler's max_snoozes: ended dead so it cannot"
            f" wait forever (last: {reason})"
        )
        return "dead" if self.fail(owner, job_id, error, dead=True) else "lost"

    def snoozes_counted(self) -> bool:
        """Whether the schema counts snoozes (version 7): before it a Snooze is a retry."""
        return self.has_limits_schema()

    def has_limits_schema(self) -> bool:
        """Schema 7 or later (asked once per store, as _has_node_column)."""
        if self._limits_schema is None:
            version = self.schema_version()
            self._limits_schema = version is not None and version >= LIMITS_SCHEMA_VERSION
        return self._limits_schema

    def require_limits_schema(self) -> None:
        """[limits] are kept only on schema 7: never claim a limited job without them."""
        if not self.has_limits_schema():
            raise SchemaError(
                f"[limits] need schema version {LIMITS_SCHEMA_VERSION}: run `forkq schema apply`"
            )

    def release(self, owner: str, ids: Sequence[int], count_attempt: bool = False) -> int:
        """Return held jobs to ready now; unless `count_attempt`, the claim's attempt is undone."""
        if not ids:
            return 0
        return self._run(
            "release", owner=owner, ids=self._ids(ids), uncount=0 if count_attempt else 1
        )

    def held_by(self, owner: str) -> list[JobRow]:
        return [JobRow.from_mapping(r) for r in self._rows("held_by", owner=owner)]

    def record_throughput(
        self, minute: float, host: str, counts: Mapping[str, tuple[int, int]]
    ) -> int:
        """Add {queue: (done, failed)} to `minute` (epoch seconds) for this host; how many
        queues were written (in one transaction, sorted: two masters never deadlock)."""

        def attempt() -> int:
            with self._tx():
                for queue, (done, failed) in sorted(counts.items()):
                    params = dict(minute=minute, queue=queue, host=host, done=done, failed=failed)
                    self._execute("record_throughput", self._params(**params))
            return len(counts)

        return self._retrying(attempt) if counts else 0

    def prune_throughput(self, older_than: float = 86_400.0) -> int:
        return self._run("prune_throughput", age_us=micros(older_than), limit=PURGE_CHUNK)

    def cancelling_jobs(self, limit: int = 1000) -> list[tuple[int, str]]:
        """(job id, holder) of every job asked to cancel while it ran."""
        return [
            (int(r["id"]), str(r["locked_by"])) for r in self._rows("cancelling_jobs", limit=limit)
        ]

    def finish_cancel(self, job_id: int) -> bool:
        """A cancelling job whose holder is gone ends cancelled; False if it was not cancelling."""
        return self._run("finish_cancel", id=job_id) == 1

    def expired_leases(self, limit: int = 500) -> list[JobRow]:
        return [JobRow.from_mapping(r) for r in self._rows("expired_leases", limit=limit)]

    def due_queues(self, queues: Sequence[str]) -> dict[str, float]:
        """Per queue with ready jobs: seconds until the earliest is due (<= 0: due now)."""
        return {q: t.ready_in for q, t in self.poll(queues).items() if t.ready_in is not None}

    def poll(self, queues: Sequence[str]) -> dict[str, QueueTimes]:
        """One query, three index dives per queue: when its ready and scheduled jobs fall due."""
        if not queues:
            return {}
        rows = self._rows("due_queues", queues=json.dumps(list(queues)))
        return {
            r["queue"]: QueueTimes(
                _seconds(r["wait_us"]), _seconds(r["scheduled_us"]), _seconds(r["last_us"])
            )
            for r in rows
        }

    def promote(self, queue: str, limit: int = PROMOTE_BATCH) -> int:
        """Make up to `limit` scheduled jobs due within SCHEDULE_AHEAD ready; how many."""
        return self._move("promote", queue, limit)

    def demote(self, queue: str, limit: int = PROMOTE_BATCH) -> int:
        """Move up to `limit` ready jobs due after SCHEDULE_AHEAD to scheduled; how many."""
        return self._move("demote", queue, limit)

    def _move(self, kind: str, queue: str, limit: int) -> int:
        def attempt() -> int:
            with self._tx():
                params = self._params(queue=queue, limit=limit, ahead_us=AHEAD_US)
                ids = [row["id"] for row in self._fetchall(f"{kind}_select", params)]
                if not ids:
                    return 0
                return self._execute(f"{kind}_update", self._params(ids=self._ids(ids)))

        return self._retrying(attempt)

    def count_ready(self, queue: str, cap: int = 10_000) -> int:
        return int(self._rows("count_ready", queue=queue, cap=cap)[0]["n"])

    # --- operators -----------------------------------------------------------------------

    def stats(
        self, cap: int | None = STATS_CAP, queues: Iterable[str] = (), minor_cap: int | None = None
    ) -> list[QueueStats]:
        """Per queue: ready, delayed, running, dead, done, oldest ready age, paused.

        Never a scan of the jobs table, so a check tick costs the same at 10k rows and at
        5M: queue names come one index dive each (stats_first_queue, then each queue's
        `next_queue`), and each queue is one statement of index ranges that stop after
        `cap` + 1 entries. A count past `cap` is reported as `cap` and named in
        `QueueStats.capped`. `cap=None` counts exactly (stats_queue_exact), walking every
        index entry: for an operator who asks (`forkq status --exact`), never on a timer.

        `queues` are reported even when they hold no job (configured pools), as are
        paused queues. `minor_cap` (default: `cap`) caps the counts no alert rule reads
        (not due yet, scheduled, running, done): the check tick keeps them small.
        """
        query = "stats_queue" if cap is not None else "stats_queue_exact"
        minor = cap if minor_cap is None or cap is None else min(cap, minor_cap)
        # +1: a count past its cap shows
        limit = {} if cap is None or minor is None else {"limit": cap + 1, "minor_limit": minor + 1}
        found: dict[str, QueueStats] = {}
        name = self._rows("stats_first_queue")[0]["queue"]
        while name is not None and name not in found:  # a name seen twice: the walk is over
            row = self._rows(query, queue=name, **limit)[0]
            found[name] = _queue_stats(name, row, cap, minor)
            name = row["next_queue"]
        paused = self.paused_queues()
        for extra in (*paused, *queues):
            found.setdefault(extra, QueueStats(extra))
        return [replace(s, paused=s.queue in paused) for _, s in sorted(found.items())]

    def get_job(self, job_id: int) -> JobRow | None:
        rows = self._rows("get_job", id=job_id) or self._rows("get_archived_job", id=job_id)
        return JobRow.from_mapping(rows[0]) if rows else None

    def list_jobs(
        self, status: str | None = None, queue: str | None = None, limit: int = 50
    ) -> list[JobRow]:
        return [
            JobRow.from_mapping(r)
            for r in self._rows("list_jobs", status=status, queue=queue, limit=limit)
        ]

    def retry_jobs(self, ids: Sequence[int]) -> int:
        return self._run("retry_jobs", ids=self._ids(ids)) if ids else 0

    def retry_dead(self, queue: str | None = None) -> int:
        return self._run("retry_dead", queue=queue)

    def cancel_jobs(self, ids: Sequence[int], by: str) -> dict[int, CancelResult]:
        """Cancel jobs; {id: what happened} for every id asked for (SPEC: Job lifecycle).

        A ready or scheduled job ends `cancelled` at once; a running one becomes
        `cancelling`, and the master whose child runs it kills the child's process group
        and marks it `cancelled`. Neither is ever retried. `last_error` says "cancelled by
        <by>". Done, dead and already cancelled jobs are left as they are, and named.
        """
        wanted = list(dict.fromkeys(int(i) for i in ids))
        if not wanted:
            return {}
        params = {"ids": self._ids(wanted), "error": f"cancelled by {by}"}

        def attempt() -> dict[int, str]:
            with self._tx():
                found = {
                    int(r["id"]): str(r["status"])
                    for r in self._fetchall("cancel_select", self._params(**params))
                }
                if {JobState.READY, JobState.SCHEDULED} & set(found.values()):
                    self._execute("cancel_waiting", self._params(**params))
                if JobState.RUNNING in found.values():
                    self._execute("cancel_running", self._params(**params))
            return found

        found = self._retrying(attempt)
        missing = [i for i in wanted if i not in found]
        archived = (
            {int(r["id"]) for r in self._rows("archived_ids", ids=self._ids(missing))}
            if missing
            else set()
        )
        return {i: _cancel_result(found.get(i), i in archived) for i in wanted}

    def purge(self, status: str, older_than: float, queue: str | None = None) -> int:
        """Delete done or dead jobs finished more than `older_than` seconds ago, in chunks."""
        total = 0
        while True:
            deleted = self._run(
                "purge_finished",
                status=status,
                age_us=micros(older_than),
                queue=queue,
                limit=PURGE_CHUNK,
            )
            total += deleted
            if deleted < PURGE_CHUNK:
                return total

    def purge_archive(self, older_than: float, queue: str | None = None) -> int:
        total = 0
        while True:
            deleted = self._run(
                "purge_archive", age_us=micros(older_than), queue=queue, limit=PURGE_CHUNK
            )
            total += deleted
            if deleted < PURGE_CHUNK:
                return total

    def purge_results(self, older_than: float, queue: str) -> int:
        """Delete task results of `queue` finished more than `older_than` seconds ago, in
        chunks; a result whose job waits or runs again stays. Nothing before schema 6."""
        if not self._has_results_table():
            return 0
        total = 0
        while True:
            deleted = self._run(
                "purge_results", age_us=micros(older_than), queue=queue, limit=PURGE_CHUNK
            )
            total += deleted
            if deleted < PURGE_CHUNK:
                return total

    def _has_results_table(self) -> bool:
        """Asked once per store, as _has_node_column."""
        if self._results_table is None:
            version = self.schema_version()
            self._results_table = version is not None and version >= RESULTS_SCHEMA_VERSION
        return self._results_table

    # --- task results (supervisor.contrib.django) ----------------------------------------
    # On the application's own connection, as insert_on: inside its transaction (a job
    # enqueued and not yet committed is seen by the same connection), driver errors as
    # the driver raises them. Times come back as epoch seconds whatever the session's
    # time zone.

    def result_job_on(self, connection: Any, job_id: int) -> dict[str, Any] | None:
        """The job (or its archived row) as a task result reads it; None if neither."""
        rows = self._fetchall_on(connection, "result_job", {"id": job_id})
        return rows[0] if rows else None

    def result_on(self, connection: Any, job_id: int) -> dict[str, Any] | None:
        """The job's forkq_results row; None if no attempt was recorded (or it was pruned)."""
        rows = self._fetchall_on(connection, "get_result", {"id": job_id})
        return rows[0] if rows else None

    def save_result_on(self, connection: Any, values: Mapping[str, Any]) -> None:
        """Write a job's whole result row: id, queue, status, payload, return_value,
        errors, workers (JSON text) and enqueued_at ... finished_at (epoch seconds)."""
        self._execute_on(connection, "save_result", dict(values))

    def set_paused(self, queue: str, paused: bool) -> None:
        self._run("set_paused", queue=queue, paused=1 if paused else 0)

    def paused_queues(self) -> set[str]:
        return {r["queue"] for r in self._rows("paused_queues")}

    # --- processes -----------------------------------------------------------------------

    def register_process(
        self,
        name: str,
        host: str,
        pid: int,
        role: str,
        pool: str | None = None,
        master: str | None = None,
        node: str | None = None,
    ) -> None:
        """Insert the process's row, or beat it if it exists.

        `node` (proc.node_id()) says which machine and pid namespace the pid belongs to.
        On a schema older than NODE_SCHEMA_VERSION the row is written without it: the
        daemon still runs there, and a row without a node is never settled by a master's
        boot-time look at pids, only by the stale-heartbeat path.
        """
        query = "register_process" if self._has_node_column() else "register_process_no_node"
        self._run(
            query, name=name, host=host, pid=pid, role=role, pool=pool, master=master, node=node
        )

    def _has_node_column(self) -> bool:
        """Asked once per store (an upgrade while it runs is seen after a restart)."""
        if self._node_column is None:
            version = self.schema_version()
            self._node_column = version is not None and version >= NODE_SCHEMA_VERSION
        return self._node_column

    def beat(self, names: Sequence[str]) -> int:
        return self._run("beat_processes", names=self._ids(names)) if names else 0

    def remove_processes(self, names: Sequence[str]) -> int:
        return self._run("remove_processes", names=self._ids(names)) if names else 0

    def stale_processes(self, older_than: float) -> list[ProcessRow]:
        return [_process(r) for r in self._rows("stale_processes", age_us=micros(older_than))]

    def list_processes(self) -> list[ProcessRow]:
        return [_process(r) for r in self._rows("list_processes")]

    # --- locks ---------------------------------------------------------------------------

    def try_lock(self, name: str, owner: str, ttl: float) -> bool:
        """Take the lock if it is free or expired (seed 001's lock_by / expire_at design)."""
        params = {"name": name, "owner": owner, "ttl_us": micros(ttl)}
        if self._run("lock_take", **params) == 1:
            return True
        return self._run("lock_insert", **params) == 1

    def renew_lock(self, name: str, owner: str, ttl: float) -> bool:
        return self._run("lock_renew", name=name, owner=owner, ttl_us=micros(ttl)) == 1

    def release_lock(self, name: str, owner: str) -> bool:
        return self._run("lock_release", name=name, owner=owner) == 1

    def list_locks(self) -> list[tuple[LockRow, bool]]:
        out = []
        for r in self._rows("list_locks"):
            row = LockRow(
                r["name"], r["owner"], utc(r["acquired_at"]), utc(r["expires_at"]) or datetime.now()
            )
            out.append((row, bool(r["live"])))
        return out

    # --- schedules -----------------------------------------------------------------------

    def enqueue_slot(self, schedule: str, slot: float, job: NewJob) -> int | None:
        """Enqueue `job` for one due slot, once across all hosts: the slot row and the job
        commit together, and a slot another host already recorded returns None."""

        def attempt() -> int | None:
            try:
                with self._tx():
                    self._execute("insert_slot", self._params(schedule=schedule, slot=slot))
                    job_id = self._insert_job(self._params(**self.job_params(job)))
                    self._execute(
                        "set_slot_job", self._params(schedule=schedule, slot=slot, job_id=job_id)
                    )
                    return job_id
            except DuplicateKey:
                return None

        return self._retrying(attempt)

    def last_slot(self, schedule: str) -> float | None:
        value = self._rows("last_slot", schedule=schedule)[0]["slot"]
        return None if value is None else float(value)

    # --- alerts --------------------------------------------------------------------------

    def load_alerts(self) -> dict[str, dict[str, Any]]:
        out = {}
        for r in self._rows("load_alerts"):
            detail = json.loads(r["detail"]) if r["detail"] else {}
            out[r["alert_key"]] = {
                "state": r["state"],
                "detail": detail,
                "since": None if r["since"] is None else float(r["since"]),
                "notified_at": None if r["notified_at"] is None else float(r["notified_at"]),
            }
        return out

    def save_alert(
        self, key: str, state: str, detail: dict[str, Any], since: float, notified_at: float | None
    ) -> None:
        self._run(
            "save_alert",
            key=key,
            state=state,
            detail=json.dumps(detail, sort_keys=True),
            since=since,
            notified_at=notified_at,
        )

    # --- web: the dashboard's reads and bulk actions (supervisor/web) ---------------------
    # Every read is a primary-key dive or an index range that stops at a LIMIT.

    def throughput(self, seconds: float) -> list[Throughput]:
        """Per minute and queue, summed over hosts, for the last `seconds` (database clock)."""
        return [
            Throughput(float(r["minute"]), r["queue"], int(r["done"]), int(r["failed"]))
            for r in self._rows("web_throughput", age_us=micros(seconds))
        ]

    def job_id_range(self) -> tuple[int, int] | None:
        """The lowest and highest job ids, None when there is no job."""
        row = self._rows("web_id_range")[0]
        return None if row["last"] is None else (int(row["first"]), int(row["last"]))

    def jobs_window(
        self,
        before: int,
        floor: int,
        limit: int,
        *,
        queue: str | None = None,
        status: str | None = None,
        handler: str | None = None,
    ) -> list[JobListing]:
        """Jobs with floor <= id < before that match, newest first: reads at most
        before - floor rows of the primary key, however few match."""
        rows = self._rows(
            "web_jobs_window",
            before=before,
            floor=floor,
            limit=limit,
            queue=queue,
            status=status,
            handler=handler,
        )
        return [JobListing.from_mapping(r) for r in rows]

    def count_status(self, status: str, queue: str | None, cap: int) -> int:
        """Jobs of `status` (in `queue`), counted up to `cap` + 1 index entries."""
        query = "web_count_status" if queue is None else "web_count_status_queue"
        return int(self._rows(query, status=status, queue=queue, limit=cap + 1)[0]["n"])

    def jobs_by_status(
        self, status: str, queue: str | None, handler: str | None, before: int, limit: int
    ) -> list[JobListing]:
        """Newest first from the status index: for a status with few jobs (count_status)."""
        query = "web_jobs_status" if queue is None else "web_jobs_status_queue"
        rows = self._rows(
            query, status=status, queue=queue, handler=handler, before=before, limit=limit
        )
        return [JobListing.from_mapping(r) for r in rows]

    def job_id_by_key(self, key: str) -> int | None:
        rows = self._rows("web_job_by_key", key=key)
        return int(rows[0]["id"]) if rows else None

    def job_listing(self, job_id: int) -> JobListing | None:
        """Every column of one job, the archive's too, its lease holder's host and pid."""
        rows, archived = self._rows("get_job", id=job_id), False
        if not rows:
            rows, archived = self._rows("get_archived_job", id=job_id), True
        if not rows:
            return None
        row = dict(rows[0])
        holder = self._rows("web_process", name=row["locked_by"]) if row["locked_by"] else []
        if holder:
            row.update(host=holder[0]["host"], pid=holder[0]["pid"])
        return JobListing.from_mapping(row, archived=archived)

    def running_jobs(self, queue: str | None = None, limit: int = 500) -> list[JobListing]:
        rows = self._rows("web_running", queue=queue, limit=limit)
        return [JobListing.from_mapping(r) for r in rows]

    def discard_dead_jobs(self, ids: Sequence[int]) -> int:
        """Delete these jobs if they are dead (a stale page never deletes another kind)."""
        return self._run("web_discard", ids=self._ids(ids)) if ids else 0

    def discard_queue_dead(self, queue: str) -> int:
        """Delete every dead job of `queue`, a chunk per transaction."""
        return self._chunks("web_discard_dead", queue)

    def retry_queue_dead(self, queue: str) -> int:
        """Make every dead job of `queue` ready now, a chunk per transaction."""
        return self._chunks("web_retry_dead", queue)

    def _chunks(self, query: str, queue: str) -> int:
        total = 0
        while True:
            changed = self._run(query, queue=queue, limit=PURGE_CHUNK)
            total += changed
            if changed < PURGE_CHUNK:
                return total

    def schedule_slots(self, schedule: str, limit: int = 10) -> list[tuple[float, int | None]]:
        """(slot, job id) of a schedule's latest enqueued slots, newest first."""
        return [
            (float(r["slot"]), None if r["job_id"] is None else int(r["job_id"]))
            for r in self._rows("web_slots", schedule=schedule, limit=limit)
        ]


def _queue_stats(
    queue: str, row: dict[str, Any], cap: int | None, minor: int | None = None
) -> QueueStats:
    """One stats_queue row: counts past `cap` become `cap` and are named in `capped`.

    `delayed` adds two ranges (scheduled rows, and ready rows not yet due); it is a
    lower bound when either is.
    """
    capped: set[str] = set()

    def count(name: str, *columns: str) -> int:
        total = 0
        for column in columns or (name,):
            value = int(row[column] or 0)
            limit = cap if column in ("ready", "dead") else minor
            if limit is not None and value > limit:
                value = limit
                capped.add(name)
            total += value
        return total

    return QueueStats(
        queue,
        ready=count("ready"),
        delayed=count("delayed", "ready_later", "scheduled"),
        running=count("running"),
        dead=count("dead"),
        done=count("done"),
        oldest_ready_age=max(0.0, int(row["oldest_us"] or 0) / 1e6),
        capped=frozenset(capped),
    )


_CANCEL_RESULTS: dict[str, CancelResult] = {
    JobState.READY: CancelResult.CANCELLED,
    JobState.SCHEDULED: CancelResult.CANCELLED,
    JobState.RUNNING: CancelResult.CANCELLING,
    JobState.CANCELLING: CancelResult.CANCELLING,  # asked twice: still on its way out
    JobState.DONE: CancelResult.DONE,
    JobState.DEAD: CancelResult.DEAD,
    JobState.CANCELLED: CancelResult.ALREADY_CANCELLED,
}


def _cancel_result(status: str | None, archived: bool) -> CancelResult:
    if status is None:
        return CancelResult.DONE if archived else CancelResult.NOT_FOUND
    return _CANCEL_RESULTS.get(status, CancelResult.NOT_FOUND)


def _claimed(row: dict[str, Any], queue: str, owner: str) -> JobRow:
    """The row as it is after claim_update, without reading it back.

    claim_select reads only the columns a worker uses; the lease and time columns it
    does not read are None here.
    """
    return JobRow(
        id=int(row["id"]),
        queue=queue,
        handler=row["handler"],
        payload=row["payload"],
        status=JobState.RUNNING,
        priority=int(row["priority"]),
        run_at=datetime.fromtimestamp(row["run_at_s"], UTC),
        attempts=int(row["attempts"]) + 1,
        max_attempts=None if row["max_attempts"] is None else int(row["max_attempts"]),
        unique_key=row["unique_key"],
        locked_by=owner,
        locked_until=None,
        last_error=None,
        enqueued_at=datetime.fromtimestamp(row["enqueued_at_s"], UTC),
        started_at=None,
        finished_at=None,
        limit_key=row.get("limit_key"),  # read by claims under [limits] (store/limits.py)
    )


def _seconds(us: Any) -> float | None:
    return None if us is None else int(us) / 1e6


def _process(row: dict[str, Any]) -> ProcessRow:
    return ProcessRow(
        name=row["name"],
        host=row["host"],
        pid=int(row["pid"]),
        role=row["role"],
        pool=row["pool"],
        master=row["master"],
        started_at=utc(row["started_at"]) or datetime.now(),
        heartbeat_at=utc(row["heartbeat_at"]) or datetime.now(),
        node=row.get("node"),
    )
