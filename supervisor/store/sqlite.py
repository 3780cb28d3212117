"""SQLite backend: the embedded default. WAL, a busy timeout, and BEGIN IMMEDIATE for writes.

Every write takes the write lock up front (BEGIN IMMEDIATE), so a reader never has to
upgrade to a writer mid-transaction, which in WAL mode fails at once with
SQLITE_BUSY_SNAPSHOT instead of waiting. `synchronous = FULL` makes each commit
durable across a power cut, not only across a crash of the process.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from supervisor.dburl import DatabaseURL
from supervisor.errors import (
    ConnectionLost,
    DatabaseError,
    DuplicateKey,
    PayloadTooLarge,
    TablesMissing,
    TransientDatabaseError,
)
from supervisor.models import Enqueued, NewJob
from supervisor.store.base import Store
from supervisor.store.queries import backend_queries, schema_text, split_script

QUERIES = backend_queries("sqlite")
T = TypeVar("T")


class SQLiteStore(Store):
    backend = "sqlite"
    # 3000-01-01 UTC: a later run_at is a raw INSERT's milliseconds, which the chores end
    # dead (untimed_select), so forkq writes none (datetime reads back up to 9999).
    TIME_LIMIT = 32503680000.0
    few_left = tail_open = 0  # one writer at a time: a batch's last finisher sees every other end

    def __init__(self, url: DatabaseURL, busy_timeout: float = 30.0) -> None:
        self.url = url
        self.path = url.path
        self.queries = QUERIES
        self.busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._in_tx = False
        self._inherited: list[sqlite3.Connection] = []
        self.may_create = False

    def _connection(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid != os.getpid():
            # Never close or use a handle inherited across fork (SQLite forbids it); keep
            # it referenced so the garbage collector does not close it either.
            self._inherited.append(self._conn)
            self._conn, self._in_tx = None, False
        if self._conn is None:
            if self.path != ":memory:" and not self.may_create and not os.path.exists(self.path):
                where = os.path.abspath(self.path)  # opening it would make an empty file
                raise TablesMissing(f"no SQLite database at {where}: run `forkq schema apply`")
            if self.path != ":memory:":
                parent = Path(self.path).parent
                try:
                    parent.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise ConnectionLost(
                        f"database unreachable: cannot create {parent}: {exc.strerror}"
                    ) from exc
            with self._errors(opening=True):
                conn = sqlite3.connect(
                    self.path,
                    timeout=0.0,  # we wait for the write lock ourselves: see _retrying
                    isolation_level=None,
                    check_same_thread=False,
                )
                conn.row_factory = _dict_row
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = FULL")
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def too_large_to_keep(self, job_id: int, queue: str, value: str) -> str | None:
        refused = _too_long(self._connection(), "its return value", value)
        return refused and f"{refused}: keep large data out of the return value"

    def missing_tables(self) -> str:
        if self.path != ":memory:" and not os.path.exists(self.path):
            return f"no SQLite database at {os.path.abspath(self.path)}: run `forkq schema apply`"
        return super().missing_tables()

    def apply_schema(self) -> int:
        self.may_create = True  # `forkq schema apply` alone makes a missing file
        return super().apply_schema()

    def close(self) -> None:
        conn, self._conn, self._in_tx = self._conn, None, False
        if conn is not None and self._pid == os.getpid():
            conn.close()

    @contextmanager
    def _errors(self, *, opening: bool = False) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            if opening and "unable to open" in str(exc) and os.path.exists(self.path):
                # A file that is there and cannot be opened (not SQLite's to open, e.g.
                # under /proc, or no right to its directory for the WAL): waiting will
                # not open it, so it is refused, not waited for as unreachable.
                where = os.path.abspath(self.path)
                raise DatabaseError(f"cannot open the SQLite database at {where}: {exc}") from exc
            if "Could not decode to UTF-8" in str(exc) and self._conn is not None:
                # A raw INSERT's bytes that are no UTF-8: from now on this connection reads
                # them (as surrogates, which mark the row unreadable: columns.py), and the
                # read is tried again. Never before: the tolerant decoder costs every read.
                self._conn.text_factory = _tolerant_text
                raise TransientDatabaseError(str(exc)) from exc
            raise _translated(exc, self.path) from exc

    def _retrying(self, operation: Callable[[], T]) -> T:
        """Wait for the write lock in short, jittered naps until `busy_timeout`.

        SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms; with several workers
        taking turns on short transactions those naps, not the work, set the pace.
        """
        deadline = time.monotonic() + self.busy_timeout
        nap = 0.0001
        while True:
            try:
                return operation()
            except TransientDatabaseError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(random.uniform(nap / 2, nap))
                nap = min(0.005, nap * 1.5)

    def _execute(self, name: str, params: dict[str, Any]) -> int:
        sql = self.queries[name]
        if self._in_tx or sql.lstrip().upper().startswith("SELECT"):
            with self._errors():
                return self._connection().execute(sql, params).rowcount
        with self._transaction(), self._errors():
            return self._connection().execute(sql, params).rowcount

    def _fetchall(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        with self._errors():
            return list(self._connection().execute(self.queries[name], params).fetchall())

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        if self._in_tx:
            yield
            return
        conn = self._connection()
        self._begin_immediate(conn)
        self._in_tx = True
        try:
            yield
            with self._errors():
                conn.execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        finally:
            self._in_tx = False

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """Take the write lock, waiting for it here in _retrying's short jittered naps: a
        busy lock is the common case when several workers claim (several tries a claim at
        W = 4), and a try that goes back up through the error translation and the
        transaction's context managers costs tens of microseconds; this one costs the
        statement. Past `busy_timeout` (or on any other error) it raises as before."""
        nap, deadline = 0.0001, 0.0
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                text = str(exc)
                if "locked" not in text and "busy" not in text:
                    raise _translated(exc, self.path) from exc
                now = time.monotonic()
                if not deadline:
                    deadline = now + self.busy_timeout
                elif now >= deadline:
                    raise TransientDatabaseError(text) from exc
            except sqlite3.Error as exc:
                raise _translated(exc, self.path) from exc
            time.sleep(random.uniform(nap / 2, nap))
            nap = min(0.005, nap * 1.5)

    def _ids(self, ids: Sequence[int | str]) -> Any:
        return json.dumps(list(ids))

    def _schema_statements(self) -> list[str]:
        return split_script(schema_text("sqlite"))

    def _run_ddl(self, statements: list[str]) -> None:
        with self._transaction(), self._errors():
            for statement in statements:
                self._connection().execute(statement)

    def _insert_job(self, params: dict[str, Any]) -> Enqueued:
        if params.get("group_key") is not None and params.get("join_alone", True):
            # Two statements (the INSERT, its tenant's joining the round): one transaction,
            # so a retry after a busy lock redoes both, never an INSERT that committed.
            with self._transaction():
                return self._insert_job_alone(params)
        return self._insert_job_alone(params)

    def _insert_job_alone(self, params: dict[str, Any]) -> Enqueued:
        with self._errors():
            return self._insert(self._connection(), params)

    def insert_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        if len(jobs) == 1:  # one statement is its own transaction: no BEGIN / COMMIT round
            return [self.enqueue(jobs[0])]

        def attempt() -> list[Enqueued]:
            with self._transaction():
                now = self._params()
                ids = [
                    self._insert_job({**now, **self.job_params(j), "join_alone": False})
                    for j in jobs
                ]
                if rounds := sorted({(j.queue, j.group_key) for j in jobs if j.group_key}):
                    self._execute("join_rounds", {"pairs": json.dumps(rounds)})
                return ids

        return self._retrying(attempt) if jobs else []

    def insert_on(self, connection: Any, job: NewJob) -> Enqueued:
        return self._insert(connection, self._params(**self.job_params(job)))

    def _fetchall_on(
        self, connection: Any, name: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        cursor = connection.execute(self.queries[name], params)
        rows = cursor.fetchall()
        # The caller's connection has its own row factory (tuples, unless it set one).
        return [row if isinstance(row, dict) else _dict_row(cursor, row) for row in rows]

    def _execute_on(self, connection: Any, name: str, params: dict[str, Any]) -> int:
        return int(connection.execute(self.queries[name], params).rowcount)

    def _insert(self, connection: sqlite3.Connection, params: dict[str, Any]) -> Enqueued:
        """One job's INSERT on `connection` (ours or the caller's); its id."""
        _check_length(connection, params["payload"])
        cursor = connection.execute(self.queries[self.insert_query(params)], params)
        grouped = params.get("group_key") is not None
        if params.get("batch_id") is not None:  # a batch's job: no unique key, no RETURNING
            assert cursor.lastrowid is not None
            job_id = Enqueued(cursor.lastrowid)
        elif not (grouped or params.get("tags") is not None or params["unique_key"] is not None):
            assert cursor.lastrowid is not None  # set by every successful INSERT
            return Enqueued(cursor.lastrowid)
        else:
            # fetchall: a RETURNING statement (a unique key, a group_key, tags) is finished
            # (and, outside a transaction, committed) only once every row has been read.
            # Rows are dicts on our connection.
            [row] = cursor.fetchall()
            row = row if isinstance(row, dict) else _dict_row(cursor, row)
            job_id = Enqueued(row["id"], bool(row.get("duplicates")))  # > 0: the key was held
        if grouped and params.get("join_alone", True) and not job_id.conflicted:  # joins the
            connection.execute(self.queries["join_round"], params)  # round (a batch's: insert_many)
        return job_id


def _check_length(connection: sqlite3.Connection, payload: str) -> None:
    """Refuse a payload longer than the connection's SQLITE_LIMIT_LENGTH (1e9 bytes unless
    lowered), which SQLite would refuse as "string or blob too big"."""
    refused = _too_long(connection, "the job's payload", payload)
    if refused:
        raise PayloadTooLarge(
            f"{refused}: keep large data out of the payload (store it elsewhere and enqueue a"
            " reference)"
        )


def _too_long(connection: sqlite3.Connection, what: str, value: str) -> str | None:
    limit = connection.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
    if len(value) * 4 < limit:  # UTF-8: at most 4 bytes a character
        return None
    size = len(value.encode("utf-8"))
    if size <= limit:
        return None
    return (
        f"{what} is {_kilobytes(size)}, more than SQLite's limit on a value"
        f" (SQLITE_LIMIT_LENGTH, {_kilobytes(limit)})"
    )


def _kilobytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB" if size >= 1024 * 1024 else f"{size / 1024:.1f} KB"


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> dict[str, Any]:
    return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}


def _tolerant_text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


def _translated(exc: sqlite3.Error, path: str) -> Exception:
    """forkq's error for a sqlite3 error (on the file at `path`): a busy or locked database
    is transient."""
    if isinstance(exc, sqlite3.IntegrityError):
        if "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc):
            return DuplicateKey(str(exc))
        return DatabaseError(f"database error: {exc}")
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        if "locked" in text or "busy" in text:
            return TransientDatabaseError(text)
        if "unable to open" in text or "disk I/O" in text:
            return ConnectionLost(f"database unreachable: {text}")
        if text.startswith("no such table: forkq_"):
            missing = f"forkq tables are missing in {path} ({text})"
            return TablesMissing(f"{missing}: run `forkq schema apply`")
        return DatabaseError(f"database error: {text}")
    return DatabaseError(f"database error: {exc}")
