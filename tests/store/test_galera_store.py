"""`[database] nodes` against a plain (non-Galera) MariaDB, the shared one, read only:
such a server is refused, with the reason; every table forkq creates is InnoDB with a
primary key (what Galera replicates). The cluster: tests/faults/test_faults_galera.py."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from util import free_tcp_port, mysql_connect

from supervisor.dburl import parse_database_url, with_nodes
from supervisor.errors import ConnectionLost, DatabaseError
from supervisor.store import open_store
from supervisor.store.mysql import MySQLStore


def test_a_server_that_is_not_a_galera_node_is_refused(mysql_db_url: str) -> None:
    closed = parse_database_url(mysql_db_url)
    dead = f"mysql://{closed.user}:{closed.password}@127.0.0.1:{free_tcp_port()}/{closed.database}"
    store = open_store(with_nodes([dead, mysql_db_url]))
    try:
        with pytest.raises(ConnectionLost) as caught:
            store.stats()
    finally:
        store.close()
    message = str(caught.value)
    assert "no Galera node answers Synced" in message
    assert "not a Galera node" in message and "(2003)" in message  # each node's reason
    assert f":{closed.password}@" not in message and ":***@" in message  # never a password


def test_every_table_is_innodb_with_a_primary_key(mysql_db_url: str) -> None:
    conn = mysql_connect(mysql_db_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT t.TABLE_NAME, t.ENGINE, COUNT(c.CONSTRAINT_NAME)"
                " FROM information_schema.TABLES t LEFT JOIN information_schema.TABLE_CONSTRAINTS c"
                " ON c.TABLE_SCHEMA = t.TABLE_SCHEMA AND c.TABLE_NAME = t.TABLE_NAME"
                " AND c.CONSTRAINT_TYPE = 'PRIMARY KEY'"
                " WHERE t.TABLE_SCHEMA = DATABASE() AND t.TABLE_TYPE = 'BASE TABLE'"
                " GROUP BY t.TABLE_NAME, t.ENGINE"
            )
            tables = {name: (engine, keys) for name, engine, keys in cursor.fetchall()}
    finally:
        conn.close()
    assert len(tables) >= 10, tables
    assert {n: v for n, v in tables.items() if v != ("InnoDB", 1)} == {}


class SilentAfterLogin:
    """A TCP relay on loopback to the shared server that goes silent once the client asks
    for a Galera node's state: a node that takes the login and then hangs."""

    def __init__(self, port: int) -> None:
        self.server_port = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.server_port))
            self.sockets += [client, server]
            silent = threading.Event()
            for source, sink in ((client, server), (server, client)):
                threading.Thread(
                    target=self.relay, args=(source, sink, silent, source is client), daemon=True
                ).start()

    @staticmethod
    def relay(
        source: socket.socket, sink: socket.socket, silent: threading.Event, asks: bool
    ) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                return
            if asks and b"SHOW GLOBAL STATUS" in data:
                silent.set()
            if not silent.is_set() or asks:
                sink.sendall(data)

    def close(self) -> None:
        for sock in self.sockets:  # shutdown wakes a relay in recv(); close alone would not
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


@pytest.fixture
def silent_node(mysql_db_url: str) -> Iterator[str]:
    url = parse_database_url(mysql_db_url)
    relay = SilentAfterLogin(url.port)
    yield f"mysql://{url.user}:{url.password}@127.0.0.1:{relay.port}/{url.database}"
    relay.close()


def test_a_node_that_hangs_after_the_login_costs_the_connect_timeout_only(
    mysql_db_url: str, silent_node: str
) -> None:
    """Choosing a node (and a session's look back at an earlier one) reads its state on the
    connect's timeout: a node that takes the login and then says nothing is given up after
    that, not after a statement's (60 s here; before, the whole of it)."""
    store = MySQLStore(with_nodes([silent_node, mysql_db_url]), connect_timeout=1.0)
    started = time.monotonic()
    try:
        with pytest.raises((ConnectionLost, DatabaseError)) as caught:
            store.stats()
    finally:
        store.close()
    assert time.monotonic() - started < 10, "a silent node held the choice of a node"
    assert "timed out" in str(caught.value) or "Lost connection" in str(caught.value)
