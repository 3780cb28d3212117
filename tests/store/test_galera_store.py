"""`[database] nodes` against a plain (non-Galera) MariaDB, the shared one, read only:
such a server is refused, with the reason; every table forkq creates is InnoDB with a
primary key (what Galera replicates). The cluster: tests/faults/test_faults_galera.py."""

from __future__ import annotations

import pytest
from util import free_tcp_port, mysql_connect

from supervisor.dburl import parse_database_url, with_nodes
from supervisor.errors import ConnectionLost
from supervisor.store import open_store


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
