"""MySQL 8.0+ / MariaDB 10.6+ backend over PyMySQL."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors
from pymysql.constants import CLIENT

from ..dburl import DatabaseURL
from ..errors import ConnectionLost, DatabaseError, DuplicateKey, TransientDatabaseError
from ..models import NewJob
from .base import Store, load_queries, split_script

HERE = Path(__file__).parent
QUERIES = load_queries(HERE / "mysql.sql")
# The names each query binds: PyMySQL escapes every value of the dict it is given, and
# the shared parameter dicts carry more than any one query uses.
PARAM_NAMES = {
    name: tuple(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql))) for name, sql in QUERIES.items()
}
BATCH_INSERT_QUERIES = frozenset({"insert_jobs_head", "insert_jobs_row", "insert_jobs_tail"})
INSERT_CHUNK = 1000  # rows per multi-row INSERT

DEADLOCK, LOCK_WAIT_TIMEOUT, DUPLICATE_ENTRY = 1213, 1205, 1062
# Server gone, lost, killed or shutting down, or unreachable: reconnect and try later.
CONNECTION_ERRORS = frozenset(
    {1053, 1077, 1152, 1153, 1927, 2002, 2003, 2006, 2013, 2014, 2055, 4031}
)


class MySQLStore(Store):
    backend = "mysql"

    def __init__(
        self, url: DatabaseURL, connect_timeout: float = 5.0, read_timeout: float = 60.0
    ) -> None:
        self.url = url
        self.queries = QUERIES
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._pid = 0
        self._in_tx = False
        self._mariadb: bool | None = None

    # --- connection ----------------------------------------------------------------------

    def _connection(self) -> pymysql.connections.Connection[Any]:
        if self._conn is not None and self._pid != os.getpid():
            # Inherited across fork: the parent still talks on this socket. Drop our
            # reference without COM_QUIT, which would end the parent's session.
            self._conn, self._in_tx = None, False
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
            self._pid = os.getpid()
        return self._conn

    def close(self) -> None:
        conn, self._conn, self._in_tx = self._conn, None, False
        if conn is not None and self._pid == os.getpid():
            with suppress(pymysql.err.Error):
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
        except pymysql.err.IntegrityError as exc:
            if exc.args and exc.args[0] == DUPLICATE_ENTRY:
                raise DuplicateKey(str(exc.args[1])) from exc
            raise DatabaseError(f"database error: {_describe(exc)}") from exc
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code in (DEADLOCK, LOCK_WAIT_TIMEOUT):
                raise TransientDatabaseError(_describe(exc)) from exc
            if code in CONNECTION_ERRORS:
                self._drop()
                raise ConnectionLost(f"database unreachable: {_describe(exc)}") from exc
            raise DatabaseError(f"database error: {_describe(exc)}") from exc
        except (pymysql.err.InterfaceError, OSError) as exc:
            self._drop()
            raise ConnectionLost(f"database unreachable: {_describe(exc)}") from exc
        except pymysql.err.MySQLError as exc:
            raise DatabaseError(f"database error: {_describe(exc)}") from exc

    # --- primitives ----------------------------------------------------------------------

    def _execute(self, name: str, params: dict[str, Any]) -> int:
        conn = self._connection()
        with self._errors(), conn.cursor() as cursor:
            return int(cursor.execute(self.queries[name], _bound(name, params)))

    def _fetchall(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        conn = self._connection()
        with self._errors(), conn.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(self.queries[name], _bound(name, params))
            return list(cursor.fetchall())

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        if self._in_tx:
            yield
            return
        conn = self._connection()
        with self._errors():
            conn.begin()
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
        return split_script((HERE / "mysql_schema.sql").read_text(encoding="utf-8"))

    def _run_ddl(self, statements: list[str]) -> None:
        conn = self._connection()
        for statement in statements:
            with self._errors(), conn.cursor() as cursor:
                cursor.execute(statement)

    # --- inserts -------------------------------------------------------------------------

    def _insert_job(self, params: dict[str, Any]) -> int:
        with self._errors():
            return self._insert(self._connection(), params)

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
        with self._errors(), conn.cursor() as cursor:
            rows = ",".join(
                cursor.mogrify(self.queries["insert_jobs_row"], self.job_params(j)) for j in jobs
            )
            sql = f"{self.queries['insert_jobs_head']} {rows} {self.queries['insert_jobs_tail']}"
            cursor.execute(sql)
            return [int(row[0]) for row in cursor.fetchall()]

    def _insert_each(self, jobs: Sequence[NewJob]) -> list[int]:
        """MySQL has no INSERT ... RETURNING: one statement per row, still one commit."""
        return [self._insert_job(self._params(**self.job_params(j))) for j in jobs]

    def insert_on(self, connection: Any, job: NewJob) -> int:
        return self._insert(connection, self._params(**self.job_params(job)))

    def _insert(self, connection: Any, params: dict[str, Any]) -> int:
        """One job's INSERT on `connection` (ours or the caller's); its id."""
        query = self.insert_query(params)
        # A plain cursor: the caller's connection may default to dict rows.
        with connection.cursor(pymysql.cursors.Cursor) as cursor:
            cursor.execute(self.queries[query], _bound(query, params))
            return int(cursor.lastrowid)


def _bound(query: str, params: dict[str, Any]) -> dict[str, Any]:
    """Only the values `query` names (a missing one is a KeyError here, as in PyMySQL)."""
    return {name: params[name] for name in PARAM_NAMES[query]}


def _describe(exc: BaseException) -> str:
    """One line from a driver error: its message, never the connection arguments."""
    if isinstance(exc, pymysql.err.MySQLError) and len(exc.args) >= 2:
        return f"({exc.args[0]}) {exc.args[1]}"
    return str(exc) or type(exc).__name__
