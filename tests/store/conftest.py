"""store/: the store contract and the producer side, on both backends (`db_url` runs each
test on SQLite and on MariaDB; `mysql_db_url` / `sqlite_db_url` for one backend).

In-process only: the store, `Queue`, the worker's `work_once`, the CLI's `main`, the
Django backend and PHP's PDO against the test's database. Nothing here starts a daemon
(daemon/) or kills a database server (faults/).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from util import create_database, database_name, drop_database, sqlite_url_for, with_database

from supervisor import Queue


@pytest.fixture
def producer(mysql_db_url: str) -> Iterator[Queue]:
    """A long-lived producer on the shared MariaDB, as a web app keeps one per process."""
    queue = Queue(mysql_db_url)
    yield queue
    queue.close()


@pytest.fixture(params=["sqlite", "mysql"], ids=["sqlite", "mysql"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no forkq tables at all."""
    if request.param == "sqlite":
        yield sqlite_url_for(tmp_path / "empty.db")
        return
    server = request.getfixturevalue("mysql_server_url")
    url = with_database(server, f"{database_name(server)}_{os.getpid()}_empty"[:64])
    create_database(url)
    yield url
    drop_database(url)
