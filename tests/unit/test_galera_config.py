"""`[database] nodes` (a Galera cluster): what the config accepts and refuses (exit 78
before anything forks), how a node's status is read, and that nothing forkq sends is
unsupported on Galera. The cluster itself: tests/faults/test_faults_galera.py."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from util import python, subprocess_env

from supervisor.config import build_config
from supervisor.errors import ConfigError
from supervisor.store import backend_queries, schema_text
from supervisor.store.galera import node_trouble

NODES = ["mysql://u:p@db1/app", "mysql://u:p@db2:3307/app", "mysql://v:q@db3/app"]


def database(table: dict[str, Any], override: str | None = None) -> Any:
    return build_config({"database": table}, "test.toml", override).database


def test_nodes_in_order_the_first_is_the_url() -> None:
    url = database({"nodes": NODES})
    assert [(n.host, n.port, n.user) for n in url.nodes] == [
        ("db1", 3306, "u"),
        ("db2", 3307, "u"),
        ("db3", 3306, "v"),  # each node its own credentials
    ]
    assert url.same_server(url.nodes[0]) and url.password == "p"
    # `url` may name any node: the order of `nodes` is still the order of preference
    assert database({"url": NODES[1], "nodes": NODES}).nodes == url.nodes


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"nodes": []}, "list of mysql:// urls"),
        ({"nodes": ["sqlite:///x.db"]}, "every node must be a mysql:// url"),
        ({"nodes": [NODES[0], "mysql://u:p@db2/other"]}, "same database"),
        ({"nodes": [NODES[0], "mysql://u:other@db1/app"]}, "listed twice"),
        ({"nodes": [NODES[0], "db2"]}, "database url must look like"),
        ({"nodes": NODES[:2], "url": "mysql://u:p@db9/app"}, "url must be one of nodes"),
        ({"nodes": [1, 2]}, "expected a list of strings"),
    ],
)
def test_bad_nodes_are_config_errors(table: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)) as caught:
        database(table)
    assert "database.nodes" in str(caught.value)
    assert ":p@" not in str(caught.value)  # never a password


def test_an_override_that_is_a_node_keeps_the_nodes_another_is_used_alone() -> None:
    assert len(database({"nodes": NODES}, NODES[2]).nodes) == 3
    alone = database({"nodes": NODES}, "mysql://u:p@elsewhere/app")
    assert alone.host == "elsewhere" and alone.nodes == ()


def test_forkq_run_with_bad_nodes_exits_78_before_anything_forks(tmp_path: Path) -> None:
    config = tmp_path / "forkq.toml"
    config.write_text('[database]\nnodes = ["mysql://u:p@db1/app", "sqlite:///x.db"]\n')
    env = subprocess_env("unused")
    env.pop("FORKQ_DATABASE_URL")
    result = subprocess.run(
        [python(), "-m", "supervisor", "run", "-c", str(config)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 78, result
    assert "database.nodes" in result.stderr + result.stdout
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("rows", "trouble"),
    [
        ([("wsrep_ready", "ON"), ("wsrep_local_state_comment", "Synced")], None),
        ([("wsrep_ready", "OFF"), ("wsrep_local_state_comment", "Initialized")], "wsrep_ready"),
        ([("wsrep_ready", "ON"), ("wsrep_local_state_comment", "Donor/Desynced")], "Donor"),
        ([("wsrep_ready", "ON"), ("wsrep_local_state_comment", "Joining")], "not Synced"),
        ([], "not a Galera node"),  # MySQL
        ([("wsrep_ready", "OFF")], "not a Galera node"),  # MariaDB, wsrep off
    ],
)
def test_a_node_takes_writes_only_ready_and_synced(
    rows: list[tuple[str, str]], trouble: str | None
) -> None:
    found = node_trouble(rows)
    assert found is None if trouble is None else trouble in (found or "")


UNSUPPORTED_ON_GALERA = re.compile(
    r"\b(GET_LOCK|RELEASE_LOCK|IS_FREE_LOCK|LOCK\s+TABLES?|XA\s+(START|BEGIN)|"
    r"CREATE\s+TEMPORARY|ENGINE\s*=\s*(?!InnoDB)\w+)",
    re.I,
)


def test_nothing_forkq_sends_is_unsupported_on_galera() -> None:
    """Galera replicates InnoDB tables with a primary key; it has no GET_LOCK across
    nodes, refuses LOCK TABLES and XA. (Every table's primary key, read from a live
    server: tests/store/test_galera_store.py.)"""
    texts = {**backend_queries("mysql"), "schema": schema_text("mysql")}
    found = {
        name: m.group(0) for name, sql in texts.items() if (m := UNSUPPORTED_ON_GALERA.search(sql))
    }
    assert found == {}
