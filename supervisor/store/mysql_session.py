"""The MySQL / MariaDB session under MySQLStore (mysql.py): one PyMySQL connection,
opened lazily, replaced after a fork, after the server hung up or when idle for most of
the session timeout, and driver errors translated into forkq's own.
"""

from __future__ import annotations

import os
import select
import sys
import time
import weakref
from collections.abc import Callable, Iterator
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
    TablesMissing,
    TransientDatabaseError,
)
from supervisor.store.base import Store
from supervisor.store.core import Seconds
from supervisor.store.galera import (
    RECHECK_CONNECT_TIMEOUT,
    NodeChoice,
    close_quietly,
    node_trouble,
    open_synced,
)
from supervisor.store.mysql_binds import IntIds, escape_int_ids, escape_seconds

# The error classes as PyMySQL raises them, found in sys.modules, not through `pymysql.err`:
# Django's MySQL backend on PyMySQL (install_as_MySQLdb) imports `MySQLdb.err`, which
# loads a second copy of the module and puts it at `pymysql.err`, so classes reached
# through that attribute would no longer match what the driver raises.
driver_errors = sys.modules["pymysql.err"]

T = TypeVar("T")
Connection: TypeAlias = "pymysql.connections.Connection[Any]"

DEADLOCK, LOCK_WAIT_TIMEOUT, DUPLICATE_ENTRY, NO_SUCH_TABLE = 1213, 1205, 1062, 1146
# PyMySQL's "server has gone away": raised only when a request could not be written.
REQUEST_NOT_WRITTEN = 2006
# With a session timeout, a connection idle for this share of it is replaced before its
# next statement: the server may have ended it, and that statement must not be the one
# to find out.
IDLE_REPLACE = 0.8
# Server gone, lost, killed or shutting down, or unreachable: reconnect and try later.
# 1047: a Galera node that left the cluster's primary component ("WSREP has not yet
# prepared node for application use"): the next connection goes to a Synced node.
CONNECTION_ERRORS = frozenset(
    {1047, 1053, 1077, 1152, 1153, 1927, 2002, 2003, 2006, 2013, 2014, 2055, 4031}
)


# Connections to a Galera node (wsrep_on). Such a node that aborts a transaction for
# another node's conflicting write while one statement of a multi-statement packet runs
# does not say so when more statements follow: they run, outside the transaction, and a
# COMMIT among them answers OK (MariaDB 10.11, tests/faults/test_faults_galera.py: a claim
# "committed" that was not, its jobs run twice). There each statement and the COMMIT go
# alone, so every abort is told (`packs`); a BEGIN still goes with the first statement,
# since a transaction holds nothing to abort before it.
_GALERA: weakref.WeakSet[Connection] = weakref.WeakSet()


def packs(conn: Connection) -> bool:
    """Whether statements of one transaction may share a packet on this connection."""
    return conn not in _GALERA


class MySQLSession(Store):
    """The connection half of MySQLStore, which sets these in its __init__."""

    url: DatabaseURL
    connect_timeout: float
    read_timeout: float
    session_timeout: int | None
    _used_at: float  # monotonic start of the last statement on this connection
    _conn: pymysql.connections.Connection[Any] | None
    _pid: int
    _in_tx: bool
    _tx_pending: bool  # in a transaction whose BEGIN is not sent yet (mysql.py)
    _tx_conn: pymysql.connections.Connection[Any] | None
    _mariadb: bool | None
    _nodes: NodeChoice | None  # a Galera cluster's nodes (`[database] nodes`), or None

    def _connection(self, fold: bool = False) -> pymysql.connections.Connection[Any]:
        """The session's connection, (re)opened as needed. In a transaction whose BEGIN
        waits for its first statement, it is sent now, unless the caller sends it with
        that statement (`fold`)."""
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
        if self._conn is not None and self._nodes and not self._in_tx and self._nodes.due():
            self._look_back(self._nodes)
        if self._conn is None:
            self._conn = self._open_any()
            self._pid = os.getpid()
        self._used_at = time.monotonic()
        if self._tx_pending and not fold:
            with self._errors():
                self._conn.begin()
            self._began(self._conn)
        return self._conn

    def _began(self, conn: Connection) -> None:
        """The BEGIN went out on `conn`: the transaction is open there."""
        self._tx_pending, self._in_tx, self._tx_conn = False, True, conn

    def _open_any(self) -> Connection:
        """A connection to the server, or with `[database] nodes` to the first Galera node
        that answers and is Synced (see galera.py)."""
        if self._nodes is None:
            return self._open(self.url)
        conn, problems = open_synced(self._nodes, self._nodes.order(), self._open_node)
        if conn is None:
            raise ConnectionLost("no Galera node answers Synced: " + "; ".join(problems))
        opened: Connection = conn
        return opened

    def _look_back(self, choice: NodeChoice) -> None:
        """On a later node: move back to an earlier one that is Synced again."""
        earlier = choice.earlier()
        if not earlier:
            return
        # Put aside while we look: a node that fails drops the session's connection.
        current, self._conn = self._conn, None
        conn, _ = open_synced(choice, earlier, self._open_node, RECHECK_CONNECT_TIMEOUT)
        self._conn = current
        if conn is not None:
            self.close()
            self._conn = conn

    def _open_node(self, node: DatabaseURL, timeout: float | None) -> tuple[Connection, str | None]:
        """Connect to a Galera node and read whether it takes writes, all on the connect's
        timeout: a node that logs in and then hangs must not hold the choice of a node
        (or a look back from a node that works) for a statement's whole timeout."""
        conn = self._open(node, timeout, probing=True)
        try:
            with self._errors(), conn.cursor() as cursor:
                cursor.execute(self.queries["galera_state"])
                trouble = node_trouble(list(cursor.fetchall()))
            with self._errors():
                _set_io_timeout(conn, self._handshake(timeout), self.read_timeout)
        except BaseException:
            close_quietly(conn)
            raise
        return conn, trouble

    def _handshake(self, timeout: float | None) -> float:
        return min(timeout or self.connect_timeout, self.read_timeout)

    def _open(
        self, url: DatabaseURL, timeout: float | None = None, probing: bool = False
    ) -> Connection:
        # PyMySQL reads the server's greeting and the login with read_timeout: a server
        # that takes the connection but never speaks (hung, frozen, behind a cut network)
        # would hold every connect for a query's whole timeout. The connect's own bounds it
        # (and, `probing`, the caller's first statements: it sets the long one after them).
        handshake = self._handshake(timeout)
        with self._errors(), _connecting(url, handshake):
            conn = pymysql.connect(
                host=url.host,
                port=url.port,
                user=url.user,
                password=url.password,
                database=url.database,
                unix_socket=url.unix_socket or None,
                charset="utf8mb4",
                autocommit=True,
                connect_timeout=timeout or self.connect_timeout,
                read_timeout=handshake,
                write_timeout=handshake,
                # rowcount = rows matched, not rows changed; a transaction's BEGIN and
                # COMMIT sent with its first and last statements (mysql.py `_send`)
                client_flag=CLIENT.FOUND_ROWS | CLIENT.MULTI_STATEMENTS,
                # PyMySQL builds a TLS context on every connect (tens of ms of CPU);
                # on loopback or a unix socket TLS protects nothing.
                ssl_disabled=url.is_local(),
            )
        conn.encoders[IntIds] = escape_int_ids  # a claim's ids in one step (mysql_binds.py)
        conn.encoders[Seconds] = escape_seconds  # a run_at to its microsecond
        with self._errors():
            if not probing:
                _set_io_timeout(conn, handshake, self.read_timeout)
            with conn.cursor() as cursor:
                cursor.execute(self.queries["session_setup"], {"seconds": self.session_timeout})
                while cursor.nextset():  # to the last result: SHOW VARIABLES
                    pass
                if any(str(value).upper() == "ON" for _, value in cursor.fetchall()):
                    _GALERA.add(conn)
        return conn

    def writing_through(self) -> DatabaseURL:
        """The server this session's statements go to: with `[database] nodes`, the
        Galera node chosen last (connect first: any statement does)."""
        return self._nodes.nodes[self._nodes.current] if self._nodes else self.url

    def node_trouble(self) -> str | None:
        """Why the server this session is on takes no writes as a Galera node, or None."""
        rows = self._fetchall("galera_state", {})
        return node_trouble([(row["Variable_name"], row["Value"]) for row in rows])

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
            if exc.args and exc.args[0] == NO_SUCH_TABLE and "forkq_" in str(exc.args[-1]):
                detail = _describe(exc)
                message = f"forkq tables are missing {detail}: run `forkq schema apply`"
                raise TablesMissing(message) from exc
            raise DatabaseError(f"database error: {_describe(exc)}") from exc

    def _call(self, operation: Callable[[Connection], T], fold: bool = False) -> T:
        """`operation` on this store's connection, driver errors translated.

        Outside a transaction, a request that could not be written (2006: the server was
        gone before it had the statement) is sent once more, on a new connection. One
        that was written may have run (the connection died while it ran or while its
        answer came back): it is never sent again, since a retried INSERT could enqueue
        a job twice. Inside a transaction nothing is retried: the caller sees the loss.
        """
        in_tx = self._in_tx
        try:
            conn = self._connection(fold)
            with self._errors():
                return operation(conn)
        except ConnectionLost as exc:
            cause = exc.__cause__
            if in_tx or not isinstance(cause, driver_errors.OperationalError):
                raise
            if not cause.args or cause.args[0] != REQUEST_NOT_WRITTEN:
                raise
        conn = self._connection(fold)
        with self._errors():
            return operation(conn)


@contextmanager
def _connecting(url: DatabaseURL, timeout: float) -> Iterator[None]:
    """Say what a timeout while connecting was: PyMySQL reports a greeting or a login
    that never came as "Lost connection to MySQL server during query (timed out)",
    which sends an operator looking for a slow query."""
    try:
        yield
    except driver_errors.OperationalError as exc:
        if not isinstance(exc.__context__, TimeoutError):
            raise
        where = url.unix_socket or f"{url.host}:{url.port}"
        raise driver_errors.OperationalError(
            exc.args[0],
            f"{where} took the connection but did not complete the login within"
            f" {timeout:g} s (the connect timeout): the server is hung or overloaded,"
            " or slow to resolve this host's name",
        ) from exc


def _set_io_timeout(conn: Connection, was: float, timeout: float) -> None:
    """Give a connected PyMySQL connection its statements' read and write timeout
    (PyMySQL sets them only at connect, and reads the handshake with them)."""
    if (getattr(conn, "_read_timeout", None), getattr(conn, "_write_timeout", None)) != (was, was):
        conn.close()  # a PyMySQL that keeps them elsewhere: never run on the short one
        raise DatabaseError("this PyMySQL keeps its timeouts where forkq cannot set them")
    setattr(conn, "_read_timeout", timeout)  # noqa: B010 (private to PyMySQL: checked above)
    setattr(conn, "_write_timeout", timeout)  # noqa: B010


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


def _describe(exc: BaseException) -> str:
    """One line from a driver error: its message, never the connection arguments."""
    if isinstance(exc, driver_errors.MySQLError) and len(exc.args) >= 2:
        return f"({exc.args[0]}) {exc.args[1]}"
    return str(exc) or type(exc).__name__
