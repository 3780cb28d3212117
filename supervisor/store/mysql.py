"""MySQL 8.0+ / MariaDB 10.6+ backend over PyMySQL."""

from __future__ import annotations

import math
import os
import re
import select
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeAlias, TypeVar

import pymysql
import pymysql.cursors
from pymysql.constants import CLIENT

from supervisor.dburl import DatabaseURL
from supervisor.errors import (
    ConnectionLost,
    DatabaseError,
    DuplicateKey,
    PayloadTooLarge,
    TransientDatabaseError,
)
from supervisor.models import NewJob
from supervisor.store.base import Store
from supervisor.store.queries import backend_queries, schema_text, split_script

# The error classes as PyMySQL raises them, found in sys.modules, not through `pymysql.err`:
# Django's MySQL backend on PyMySQL (install_as_MySQLdb) imports `MySQLdb.err`, which
# loads a second copy of the module and puts it at `pymysql.err`, so classes reached
# through that attribute would no longer match what the driver raises.
driver_errors = sys.modules["pymysql.err"]

T = TypeVar("T")
Connection: TypeAlias = "pymysql.connections.Connection[Any]"

QUERIES = backend_queries("mysql")
# The names each query binds: PyMySQL escapes every value of the dict it is given, and
# the shared parameter dicts carry more than any one query uses.
PARAM_NAMES = {
    name: tuple(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql))) for name, sql in QUERIES.items()
}
BATCH_INSERT_QUERIES = frozenset(
    {
        "insert_jobs_head",
        "insert_jobs_row",
        "insert_jobs_tail",
        "insert_jobs_head_keyed",  # a batch with a limit_key: the column named (schema 5)
        "insert_jobs_row_keyed",
    }
)
INSERT_CHUNK = 1000  # rows per multi-row INSERT

DEADLOCK, LOCK_WAIT_TIMEOUT, DUPLICATE_ENTRY = 1213, 1205, 1062
# PyMySQL's "server has gone away": raised only when a request could not be written.
REQUEST_NOT_WRITTEN = 2006
# The smallest max_allowed_packet a server accepts: a shorter statement fits any server.
MIN_PACKET = 1024
# With a session timeout, a connection idle for this share of it is replaced before its
# next statement: the server may have ended it, and that statement must not be the one
# to find out.
IDLE_REPLACE = 0.8
# Server gone, lost, killed or shutting down, or unreachable: reconnect and try later.
CONNECTION_ERRORS = frozenset(
    {1053, 1077, 1152, 1153, 1927, 2002, 2003, 2006, 2013, 2014, 2055, 4031}
)


class MySQLStore(Store):
    backend = "mysql"

    def __init__(
        self,
        url: DatabaseURL,
        connect_timeout: float = 5.0,
        read_timeout: float = 60.0,
        session_timeout: float | None = None,
    ) -> None:
        """`session_timeout`: seconds the server keeps this store's session while idle
        (`wait_timeout`); None keeps the server's default (8 h unless configured)."""
        self.url = url
        self.queries = QUERIES
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.session_timeout = math.ceil(session_timeout) if session_timeout else None
        self._used_at = 0.0  # monotonic start of the last statement on this connection
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._pid = 0
        self._in_tx = False
        self._mariadb: bool | None = None
        # max_allowed_packet by connection (ours or a caller's): (session id, bytes).
        self._packet_limits: weakref.WeakKeyDictionary[Any, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )

    # --- connection ----------------------------------------------------------------------

    def _connection(self) -> pymysql.connections.Connection[Any]:
        if self._conn is not None and self._pid != os.getpid():
            # Inherited across fork: the parent still talks on this socket. Drop our
            # reference without COM_QUIT, which would end the parent's session.
            self._conn, self._in_tx = None, False
        if self._conn is not None and not self._in_tx and _hung_up(self._conn):
            # The server ended this idle session (a restart, KILL, wait_timeout): nothing
            # of the next statement is sent yet, so a new connection is safe.
            self._drop()
        if self._conn is not None and self._idle_too_long():
            self.close()  # politely: the server may still hold it
        if self._conn is None:
            with self._errors():
                self._conn = pymysql.connect(
                    host=self.url.host,
                    port=self.url.port,
                    user=self.url.user,
                    password=self.url.password,
                    database=self.url.database,
                    unix_socket=self.url.unix_socket or None,
                    charset="utf8mb4",
                    autocommit=True,
                    connect_timeout=self.connect_timeout,
                    read_timeout=self.read_timeout,
                    write_timeout=self.read_timeout,
                    client_flag=CLIENT.FOUND_ROWS,  # rowcount = rows matched, not rows changed
                    init_command="SET time_zone = '+00:00'",
                    # PyMySQL builds a TLS context on every connect (tens of ms of CPU);
                    # on loopback or a unix socket TLS protects nothing.
                    ssl_disabled=self.url.is_local(),
                )
                # forkq's own sessions take no gap locks: a claim, a promotion or an ack
                # never makes an application's INSERT wait, nor deadlocks with one
                # (REPEATABLE READ locks the gaps an index scan passes). Each statement
                # forkq runs is a keyed or single-row change needing nothing stronger.
                with self._conn.cursor() as cursor:
                    cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                if self.session_timeout:
                    params = {"seconds": self.session_timeout}
                    with self._conn.cursor() as cursor:
                        cursor.execute(self.queries["session_timeout"], params)
            self._pid = os.getpid()
        self._used_at = time.monotonic()
        return self._conn

    def _idle_too_long(self) -> bool:
        """Idle for most of the session timeout (never inside a transaction).

        Counted from the start of the last statement, so never less than the server's
        own count, which starts when that statement ended.
        """
        if not self.session_timeout or self._in_tx:
            return False
        return time.monotonic() - self._used_at >= IDLE_REPLACE * self.session_timeout

    def close(self) -> None:
        conn, self._conn, self._in_tx = self._conn, None, False
        if conn is not None and self._pid == os.getpid():
            with suppress(driver_errors.Error):
                conn.close()

    def _drop(self) -> None:
        conn, self._conn, self._in_tx = self._conn, None, False
        if conn is not None:
            with suppress(Exception):  # it is broken already; no COM_QUIT on a dead socket
                conn._force_close()  # type: ignore[attr-defined]

    def is_mariadb(self) -> bool:
        if self._mariadb is None:
            self._mariadb = "mariadb" in self.server_version().lower()
        return self._mariadb

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate PyMySQL errors into forkq's; a broken connection is dropped for a reconnect."""
        try:
            yield
        except driver_errors.IntegrityError as exc:
            if exc.args and exc.args[0] == DUPLICATE_ENTRY:
                raise DuplicateKey(str(exc.args[1])) from exc
            raise DatabaseError(f"database error: {_describe(exc)}") from exc
        except driver_errors.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code in (DEADLOCK, LOCK_WAIT_TIMEOUT):
                raise TransientDatabaseError(_describe(exc)) from exc
            if code in CONNECTION_ERRORS:
                self._drop()
                raise ConnectionLost(f"database unreachable: {_describe(exc)}") from exc
            raise DatabaseError(f"database error: {_describe(exc)}") from exc
        except (driver_errors.InterfaceError, OSError) as exc:
            self._drop()
            raise ConnectionLost(f"database unreachable: {_describe(exc)}") from exc
        except driver_errors.MySQLError as exc:
            raise DatabaseError(f"database error: {_describe(exc)}") from exc

    # --- primitives ----------------------------------------------------------------------

    def _call(self, operation: Callable[[Connection], T]) -> T:
        """`operation` on this store's connection, driver errors translated.

        Outside a transaction, a request that could not be written (2006: the server was
        gone before it had the statement) is sent once more, on a new connection. One
        that was written may have run (the connection died while it ran or while its
        answer came back): it is never sent again, since a retried INSERT could enqueue
        a job twice. Inside a transaction nothing is retried: the caller sees the loss.
        """
        in_tx = self._in_tx
        try:
            conn = self._connection()
            with self._errors():
                return operation(conn)
        except ConnectionLost as exc:
            cause = exc.__cause__
            if in_tx or not isinstance(cause, driver_errors.OperationalError):
                raise
            if not cause.args or cause.args[0] != REQUEST_NOT_WRITTEN:
                raise
        conn = self._connection()
        with self._errors():
            return operation(conn)

    def _execute(self, name: str, params: dict[str, Any]) -> int:
        def execute(conn: Connection) -> int:
            with conn.cursor() as cursor:
                return int(cursor.execute(self.queries[name], _bound(name, params)))

        return self._call(execute)

    def _fetchall(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        def fetchall(conn: Connection) -> list[dict[str, Any]]:
            with conn.cursor(pymysql.cursors.DictCursor) as cursor:
                cursor.execute(self.queries[name], _bound(name, params))
                return list(cursor.fetchall())

        return self._call(fetchall)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        if self._in_tx:
            yield
            return
        conn = self._call(_begin)
        self._in_tx = True
        try:
            yield
            with self._errors():
                conn.commit()
        except BaseException:
            if self._conn is not None:
                try:
                    conn.rollback()
                except Exception:
                    self._drop()
            raise
        finally:
            self._in_tx = False

    def _ids(self, ids: Sequence[int | str]) -> Any:
        return tuple(ids)  # PyMySQL escapes a tuple as (a, b, c)

    def _schema_statements(self) -> list[str]:
        return split_script(schema_text("mysql"))

    def _run_ddl(self, statements: list[str]) -> None:
        conn = self._connection()
        for statement in statements:
            with self._errors(), conn.cursor() as cursor:
                cursor.execute(statement)

    # --- inserts -------------------------------------------------------------------------

    def _insert_job(self, params: dict[str, Any]) -> int:
        return self._call(lambda conn: self._insert(conn, params))

    def insert_many(self, jobs: Sequence[NewJob]) -> list[int]:
        if not jobs:
            return []
        if len(jobs) == 1:
            return [self.enqueue(jobs[0])]
        insert = self._insert_returning if self.is_mariadb() else self._insert_each

        def attempt() -> list[int]:
            with self._transaction():
                ids: list[int] = []
                for start in range(0, len(jobs), INSERT_CHUNK):
                    ids.extend(insert(jobs[start : start + INSERT_CHUNK]))
                return ids

        return self._retrying(attempt)

    def _insert_returning(self, jobs: Sequence[NewJob]) -> list[int]:
        """MariaDB: one multi-row INSERT ... RETURNING id; each row's values escaped by the driver."""
        conn = self._connection()
        keyed = "_keyed" if any(j.limit_key is not None for j in jobs) else ""
        with self._errors(), conn.cursor() as cursor:
            row = self.queries[f"insert_jobs_row{keyed}"]
            rows = [cursor.mogrify(row, self.job_params(j)) for j in jobs]
            ids: list[int] = []
            for statement in self._statements(conn, rows, keyed):
                cursor.execute(statement)
                ids.extend(int(row[0]) for row in cursor.fetchall())
            return ids

    def _statements(self, conn: Connection, rows: list[str], keyed: str = "") -> Iterator[str]:
        """Multi-row INSERTs of `rows`, in order, each within max_allowed_packet."""
        head, tail = self.queries[f"insert_jobs_head{keyed}"], self.queries["insert_jobs_tail"]
        whole = f"{head} {','.join(rows)} {tail}"
        if _fits(whole, MIN_PACKET) or _fits(whole, limit := self._packet_limit(conn)):
            yield whole
            return
        budget = limit - _size(f"{head}  {tail}")
        batch: list[str] = []
        used = 0
        for number, row in enumerate(rows, 1):
            size = _size(row) + 1  # and its comma
            if size > budget:
                raise PayloadTooLarge(_too_large(f"job {number} of the batch", size, limit))
            if batch and used + size > budget:
                yield f"{head} {','.join(batch)} {tail}"
                batch, used = [], 0
            batch.append(row)
            used += size
        yield f"{head} {','.join(batch)} {tail}"

    def _insert_each(self, jobs: Sequence[NewJob]) -> list[int]:
        """MySQL has no INSERT ... RETURNING: one statement per row, still one commit."""
        return [self._insert_job(self._params(**self.job_params(j))) for j in jobs]

    def insert_on(self, connection: Any, job: NewJob) -> int:
        return self._insert(connection, self._params(**self.job_params(job)))

    def _fetchall_on(
        self, connection: Any, name: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        # A dict cursor of PyMySQL's own: the caller's connection may default to tuples.
        with connection.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(self.queries[name], _bound(name, params))
            return list(cursor.fetchall())

    def _execute_on(self, connection: Any, name: str, params: dict[str, Any]) -> int:
        with connection.cursor(pymysql.cursors.Cursor) as cursor:
            return int(cursor.execute(self.queries[name], _bound(name, params)))

    def _insert(self, connection: Any, params: dict[str, Any]) -> int:
        """One job's INSERT on `connection` (ours or the caller's); its id."""
        query = self.insert_query(params)
        # A plain cursor: the caller's connection may default to dict rows.
        bound = _bound(query, params)
        with connection.cursor(pymysql.cursors.Cursor) as cursor:
            most = _most_bytes(self.queries[query], bound)
            if most > MIN_PACKET and most > (limit := self._packet_limit(connection)):
                # Near the limit: bind it once more to know (only for large payloads).
                size = _size(cursor.mogrify(self.queries[query], bound))
                if size > limit:
                    raise PayloadTooLarge(_too_large("the job", size, limit))
            cursor.execute(self.queries[query], bound)
            return int(cursor.lastrowid)

    def _packet_limit(self, connection: Any) -> int:
        """The session's max_allowed_packet (read-only in a session: read once each).

        The server refuses a longer statement by closing the connection while the
        client still writes it, which looks like an outage ("server has gone away").
        """
        session = int(connection.thread_id())
        known = self._packet_limits.get(connection)
        if known is not None and known[0] == session:
            return known[1]
        with connection.cursor(pymysql.cursors.Cursor) as cursor:
            cursor.execute(self.queries["max_allowed_packet"])
            limit = int(cursor.fetchone()[0])
        self._packet_limits[connection] = (session, limit)
        return limit


def _bound(query: str, params: dict[str, Any]) -> dict[str, Any]:
    """Only the values `query` names (a missing one is a KeyError here, as in PyMySQL)."""
    return {name: params[name] for name in PARAM_NAMES[query]}


def _begin(conn: Connection) -> Connection:
    conn.begin()
    return conn


def _hung_up(conn: Connection) -> bool:
    """Whether the server ended this idle connection, found without a round trip.

    Between statements a server never speaks first: a readable socket holds its last
    words (an error such as 4031, a shutdown notice) or the end of the stream. On TLS
    it may also be a session ticket, so a ping, which reads what waits, decides.
    """
    if not conn.open:
        return True
    sock = getattr(conn, "_sock", None)
    if sock is None:  # a PyMySQL that keeps it elsewhere: no way to look without a ping
        return False
    poller = select.poll()
    try:
        poller.register(sock, select.POLLIN)
        if not poller.poll(0):
            return False
        conn.ping(reconnect=False)
    except Exception:  # any failure here means the connection is unusable
        return True
    return False


def _size(statement: str) -> int:
    """Bytes on the wire: the statement in UTF-8 and the command byte."""
    return len(statement.encode("utf-8")) + 1


def _most_bytes(template: str, bound: dict[str, Any]) -> int:
    """The most bytes `template` with `bound` takes on the wire: a string value escaped
    (each character at most doubled) and quoted, 4 bytes a character; others are short."""
    chars = len(template) + sum(
        2 * len(value) + 2 if isinstance(value, str) else 32 for value in bound.values()
    )
    return 4 * chars + 1


def _fits(statement: str, limit: int) -> bool:
    """Surely within `limit` bytes, measured only when it may not be (4 bytes a character)."""
    return len(statement) * 4 + 1 <= limit or _size(statement) <= limit


def _too_large(what: str, size: int, limit: int) -> str:
    return (
        f"{what} is {_megabytes(size)} to send, more than the server's"
        f" max_allowed_packet ({_megabytes(limit)}): keep large data out of the payload"
        " (store it elsewhere and enqueue a reference), or raise max_allowed_packet"
    )


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def _describe(exc: BaseException) -> str:
    """One line from a driver error: its message, never the connection arguments."""
    if isinstance(exc, driver_errors.MySQLError) and len(exc.args) >= 2:
        return f"({exc.args[0]}) {exc.args[1]}"
    return str(exc) or type(exc).__name__
