"""MySQL 8.0+ / MariaDB 10.6+ backend over PyMySQL.

The statements, transactions and inserts (each within the server's max_allowed_packet);
the connection they run on, and driver errors translated: mysql_session.py.
"""

from __future__ import annotations

import json
import math
import re
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pymysql
import pymysql.cursors

from supervisor.dburl import DatabaseURL
from supervisor.errors import DatabaseError, PayloadTooLarge
from supervisor.models import Enqueued, NewJob
from supervisor.store.galera import NodeChoice
from supervisor.store.mysql_binds import bound_ids, exact_seconds
from supervisor.store.mysql_claims import UNPACK
from supervisor.store.mysql_session import Connection, MySQLSession, packs
from supervisor.store.packets import (
    MIN_PACKET,
    PAYLOAD_ADVICE,
    RESULT_ADVICE,
    fits,
    most_bytes,
    packet_size,
    too_large,
)
from supervisor.store.queries import backend_queries, schema_text, split_script

QUERIES = backend_queries("mysql")
INSERT_KINDS = ("", "_keyed", "_grouped", "_tagged", "_batched")
# The names each query binds: PyMySQL escapes every value of the dict it is given, and
# the shared parameter dicts carry more than any one query uses.
PARAM_NAMES = {
    name: tuple(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql))) for name, sql in QUERIES.items()
}
# The multi-row INSERT's parts; a batch with a limit_key names the column (schema 5), with a
# group_key both keys (8), with tags those and tags (9), of q.batch() also batch_id (13).
BATCH_INSERT_QUERIES = frozenset(
    {"insert_jobs_tail"}
    | {f"insert_jobs_{part}{kind}" for part in ("head", "row") for kind in INSERT_KINDS}
)
INSERT_CHUNK = 1000  # rows per multi-row INSERT
# Reads that on a Galera node first wait for every write the cluster ordered before them:
# after a failover, a claim whose answer was lost with its node may not be applied here
# yet, and a worker looking for what it holds (worker._release_lost_claim) would miss it.
CAUSAL_READS = frozenset({"held_by"})
DICTS = pymysql.cursors.DictCursor


class MySQLStore(MySQLSession):
    backend = "mysql"
    TIME_LIMIT = 2.0**31  # TIMESTAMP ends at 2038-01-19 03:14:07.999999 UTC
    counts_matched = True  # CLIENT.FOUND_ROWS (mysql_session.py)
    indexed_columns_version = 18  # ready_wait, ready_tenant, batch_status (StoreCore)

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
        self._in_tx = False  # a BEGIN went out on _tx_conn and its transaction is open
        self._tx_pending = False  # in a transaction whose BEGIN waits for its first statement
        self._tx_depth = 0  # transactions open in this one (nested ones are part of it)
        self._tx_conn: Connection | None = None
        self._committed = False  # its COMMIT went with its last statement
        self._commit_next = False  # the next statement ends the transaction (_execute_last)
        self._mariadb: bool | None = None
        self._nodes = NodeChoice(url.nodes) if url.nodes else None
        # max_allowed_packet by connection (ours or a caller's): (session id, bytes).
        self._packet_limits: weakref.WeakKeyDictionary[Any, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )

    # --- primitives ----------------------------------------------------------------------

    def _execute(self, name: str, params: dict[str, Any]) -> int:
        commit, self._commit_next = self._commit_next and self._tx_depth == 1, False

        def execute(conn: Connection) -> int:
            with conn.cursor() as cursor:  # unless sent with the statement, _transaction commits
                sql, bound = self.queries[name], _bound(name, params)
                return self._send(conn, cursor, sql, bound, commit and packs(conn))

        return self._call(execute, fold=True)

    def _execute_last(self, name: str, params: dict[str, Any]) -> int:
        self._commit_next = True  # read by the `_execute` below (a test may wrap that one)
        try:
            return self._execute(name, params)
        finally:
            self._commit_next = False

    def _fetchall(self, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        def fetchall(conn: Connection) -> list[dict[str, Any]]:
            unpack = UNPACK.get(name)  # a claim's rows: read as tuples, then unpacked
            with conn.cursor(pymysql.cursors.Cursor if unpack else DICTS) as cursor:
                sql = self.queries[name]
                if name in CAUSAL_READS and not packs(conn):  # a Galera node
                    sql = f"SET STATEMENT wsrep_sync_wait = 1 FOR {sql}"
                self._send(conn, cursor, sql, _bound(name, params))
                return _rows(cursor, unpack)

        return self._call(fetchall, fold=True)

    def _execute_fetch(
        self, write: str, read: str, params: dict[str, Any]
    ) -> tuple[int, list[dict[str, Any]]]:
        """`write` and `read` in one packet with the transaction's BEGIN if not sent yet
        (one each on a Galera node: `packs`); the first that fails raises, as `_send`."""
        if self._committed:
            raise DatabaseError("a statement after its transaction's last one")
        bound = {**_bound(write, params), **_bound(read, params)}
        sql = f"{self.queries[write]};{self.queries[read]}"

        def execute_fetch(conn: Connection) -> tuple[int, list[dict[str, Any]]]:
            unpack = UNPACK.get(read)  # (as _fetchall)
            with conn.cursor(pymysql.cursors.Cursor if unpack else DICTS) as cursor:
                if not packs(conn):  # a Galera node: the BEGIN with `write` alone
                    count = self._send(conn, cursor, self.queries[write], bound)
                    self._send(conn, cursor, self.queries[read], bound)
                else:
                    begin = self._tx_pending
                    cursor.execute(("BEGIN;" if begin else "") + sql, bound)
                    if begin:
                        self._began(conn)
                        cursor.nextset()
                    count = int(cursor.rowcount)
                    cursor.nextset()
                return count, _rows(cursor, unpack)

        return self._call(execute_fetch, fold=True)

    def _send(
        self, conn: Connection, cursor: Any, sql: str, params: Any, commit: bool = False
    ) -> int:
        """Run one statement. A transaction's BEGIN, not sent yet, goes in the same packet
        (CLIENT.MULTI_STATEMENTS), and so does its COMMIT when `commit` says the statement
        ends it: a claim of a batch is three round trips, not five (not on a Galera node:
        mysql_session.packs). The server stops at the first statement that fails, and
        the error is raised where its result is read."""
        if self._committed:  # `_execute_last` promised the last: never run outside the tx
            raise DatabaseError("a statement after its transaction's last one")
        begin = self._tx_pending
        if not begin and not commit:
            return int(cursor.execute(sql, params))
        cursor.execute(("BEGIN;" if begin else "") + sql + (";COMMIT" if commit else ""), params)
        if begin:
            self._began(conn)
            cursor.nextset()
        count = int(cursor.rowcount)
        if commit:
            cursor.nextset()
            self._committed = True
        return count

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One transaction. Its BEGIN waits for its first statement and goes with it
        (see `_send`); a transaction that ran no statement sends nothing."""
        if self._tx_depth:
            self._tx_depth += 1  # nested: the outer one commits
            try:
                yield
            finally:
                self._tx_depth -= 1
            return
        self._tx_depth, self._tx_pending, self._committed = 1, True, False
        try:
            yield
            conn = self._tx_conn
            if self._in_tx and not self._committed and conn is not None:
                with self._errors():
                    conn.commit()
        except BaseException:
            conn = self._tx_conn
            if self._in_tx and self._conn is not None and conn is not None:
                try:
                    conn.rollback()
                except Exception:
                    self._drop()
            raise
        finally:
            self._in_tx, self._tx_pending, self._tx_depth, self._tx_conn = False, False, 0, None
            self._committed = False

    def _ids(self, ids: Sequence[int | str]) -> Any:
        return bound_ids(ids)  # (a, b, c); ints in one step (mysql_binds.py)

    def _schema_statements(self) -> list[str]:
        return split_script(schema_text("mysql"))

    def _run_ddl(self, statements: list[str]) -> None:
        conn = self._connection()
        for statement in statements:
            with self._errors(), conn.cursor() as cursor:
                cursor.execute(statement)

    # --- inserts -------------------------------------------------------------------------

    def _insert_job(self, params: dict[str, Any]) -> Enqueued:
        return self._call(lambda conn: self._insert(conn, params))

    def insert_many(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        if not jobs:
            return []
        if len(jobs) == 1:
            return [self.enqueue(jobs[0])]
        insert = self._insert_returning if self.is_mariadb() else self._insert_each
        if any(j.unique_key is not None for j in jobs):  # one row a statement: each conflict told
            insert = self._insert_each

        def attempt() -> list[Enqueued]:
            with self._transaction():
                ids: list[Enqueued] = []
                for start in range(0, len(jobs), INSERT_CHUNK):
                    ids.extend(insert(jobs[start : start + INSERT_CHUNK]))
                return ids

        return self._retrying(attempt)

    def _insert_returning(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """MariaDB: one multi-row INSERT ... RETURNING id; each row's values escaped by the driver."""
        conn = self._connection()
        keyed = "_keyed" if any(j.limit_key is not None for j in jobs) else ""
        keyed = "_grouped" if any(j.group_key is not None for j in jobs) else keyed
        keyed = "_tagged" if any(j.tags for j in jobs) else keyed
        keyed = "_batched" if any(j.batch_id is not None for j in jobs) else keyed
        with self._errors(), conn.cursor() as cursor:
            row = self.queries[f"insert_jobs_row{keyed}"]
            rows = [cursor.mogrify(row, self.job_params(j)) for j in jobs]
            ids: list[Enqueued] = []
            for statement in self._statements(conn, rows, keyed):
                cursor.execute(statement)
                ids.extend(Enqueued(row[0]) for row in cursor.fetchall())
            if rounds := sorted({(j.queue, j.group_key) for j in jobs if j.group_key is not None}):
                cursor.execute(self.queries["join_rounds"], {"pairs": json.dumps(rounds)})
            return ids

    def _statements(self, conn: Connection, rows: list[str], keyed: str = "") -> Iterator[str]:
        """Multi-row INSERTs of `rows`, in order, each within max_allowed_packet."""
        head, tail = self.queries[f"insert_jobs_head{keyed}"], self.queries["insert_jobs_tail"]
        whole = f"{head} {','.join(rows)} {tail}"
        if fits(whole, MIN_PACKET) or fits(whole, limit := self._packet_limit(conn)):
            yield whole
            return
        budget = limit - packet_size(f"{head}  {tail}")
        batch: list[str] = []
        used = 0
        for number, row in enumerate(rows, 1):
            size = packet_size(row) + 1  # and its comma
            if size > budget:
                what = f"job {number} of the batch"
                raise PayloadTooLarge(too_large(what, size, limit, PAYLOAD_ADVICE))
            if batch and used + size > budget:
                yield f"{head} {','.join(batch)} {tail}"
                batch, used = [], 0
            batch.append(row)
            used += size
        yield f"{head} {','.join(batch)} {tail}"

    def _insert_each(self, jobs: Sequence[NewJob]) -> list[Enqueued]:
        """MySQL has no INSERT ... RETURNING: one statement per row, still one commit."""
        return [self._insert_job(self._params(**self.job_params(j))) for j in jobs]

    def insert_on(self, connection: Any, job: NewJob) -> Enqueued:
        return self._insert(connection, exact_seconds(self._params(**self.job_params(job))))

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

    def _insert(self, connection: Any, params: dict[str, Any]) -> Enqueued:
        """One job's INSERT on `connection` (ours or the caller's); its id. With a unique key a
        conflict updates the job holding it: 2 affected rows (insert_job_unique)."""
        query = self.insert_query(params)
        # A plain cursor: the caller's connection may default to dict rows.
        bound = _bound(query, params)
        with connection.cursor(pymysql.cursors.Cursor) as cursor:
            most = most_bytes(self.queries[query], bound)
            if most > MIN_PACKET and most > (limit := self._packet_limit(connection)):
                # Near the limit: bind it once more to know (only for large payloads).
                size = packet_size(cursor.mogrify(self.queries[query], bound))
                if size > limit:
                    raise PayloadTooLarge(too_large("the job", size, limit, PAYLOAD_ADVICE))
            cursor.execute(self.queries[query], bound)
            job_id = Enqueued(
                cursor.lastrowid, params["unique_key"] is not None and cursor.rowcount > 1
            )
            if params.get("group_key") is not None and not job_id.conflicted:  # joins the round
                cursor.execute(self.queries["join_round"], _bound("join_round", params))
            return job_id

    def too_large_to_keep(self, job_id: int, queue: str, value: str) -> str | None:
        """Why the server would refuse to keep this return value (keep_result longer than
        its max_allowed_packet), or None; measured only when it may be that long."""
        bound = _bound("keep_result", self._params(id=job_id, queue=queue, value=value))
        most = most_bytes(self.queries["keep_result"], bound)
        if most <= MIN_PACKET:
            return None
        connection = self._connection()
        if most <= (limit := self._packet_limit(connection)):
            return None
        with connection.cursor(pymysql.cursors.Cursor) as cursor:
            size = packet_size(cursor.mogrify(self.queries["keep_result"], bound))
        return too_large("its return value", size, limit, RESULT_ADVICE) if size > limit else None

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


def _rows(cursor: Any, unpack: Any) -> list[dict[str, Any]]:
    """A result's rows as dicts; a claim's unpacked from its tuples (mysql_claims.py)."""
    return unpack(cursor.fetchall()) if unpack else list(cursor.fetchall())


def _bound(query: str, params: dict[str, Any]) -> dict[str, Any]:
    """Only the values `query` names (a missing one is a KeyError here, as in PyMySQL)."""
    return {name: params[name] for name in PARAM_NAMES[query]}
