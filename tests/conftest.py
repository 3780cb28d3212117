"""Fixtures shared by every suite: real databases, both backends.

- `db_url` is parametrized over "sqlite" and "mysql" (test ids `[sqlite]`, `[mysql]`):
  a URL whose schema is applied and whose tables are empty when the test starts. It is
  a plain string, so a test can hand it to `python -m supervisor ...` subprocesses
  (see `util.subprocess_env`).
- `sqlite_db_url` / `mysql_db_url` give one backend only, for backend-specific tests.
- `store` and `queue` wrap `db_url`.

The suites are grouped by kind, each folder with a conftest.py of the fixtures only it
uses: unit/ (pure decisions, parsing, escaping: no database server), store/ (the store
contract and the producer side on both backends), daemon/ (real `forkq run` / `forkq
work` daemons and `forkq` subprocesses), faults/ (everything marked `faults`, run by
`make test-faults`), web/ (the dashboard). The helpers every folder imports (util.py,
daemon_util.py, private_mariadb.py, django_util.py, ...) stay here, beside this file:
pytest imports it in its `prepend` mode, which puts tests/ on sys.path.

MariaDB comes from FORKQ_TEST_MYSQL_URL (default mysql://root@127.0.0.1:3306/forkq_test).
Each test session works in a database of its own, `<that database>_<pid>`, created
and schema-applied at the start and dropped at the end; tables are emptied per test.
A MariaDB that cannot be reached skips the mysql tests locally and fails them when
CI is set: CI must never pass by skipping.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run from a checkout without `pip install -e`
    sys.path.insert(0, str(REPO_ROOT))

from util import (  # noqa: E402
    DEFAULT_MYSQL_URL,
    MYSQL_URL_ENV,
    applied,
    create_database,
    database_name,
    drop_database,
    empty_tables,
    in_ci,
    mysql_connect,
    sqlite_url_for,
    with_database,
)

from supervisor import Queue  # noqa: E402
from supervisor.dburl import parse_database_url  # noqa: E402
from supervisor.store import Store, open_store  # noqa: E402

BACKENDS = ["sqlite", "mysql"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: long end-to-end runs (chaos, 2,000-job drains)")
    config.addinivalue_line(
        "markers", "faults: fault injection (killed processes, database restarts); make test-faults"
    )


def unavailable(reason: str) -> None:
    """Skip locally; fail on CI, where a skipped backend would hide a broken build."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: a missing MariaDB fails the run)", pytrace=False)
    pytest.skip(reason)


# --- MariaDB -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mysql_server_url() -> str:
    """FORKQ_TEST_MYSQL_URL once checked reachable; tests never write to its database."""
    url = os.environ.get(MYSQL_URL_ENV, DEFAULT_MYSQL_URL)
    try:
        parsed = parse_database_url(url)
    except Exception as exc:  # a ConfigError names what is wrong, never the password
        pytest.fail(f"{MYSQL_URL_ENV} is not a usable URL: {exc}", pytrace=False)
    if parsed.backend != "mysql":
        pytest.fail(f"{MYSQL_URL_ENV} must be a mysql:// URL", pytrace=False)
    try:
        mysql_connect(url, database=False).close()
    except Exception as exc:
        unavailable(f"MariaDB not reachable at {parsed.redacted()}: {type(exc).__name__}: {exc}")
    return url


@pytest.fixture(scope="session")
def mysql_session_url(mysql_server_url: str) -> Iterator[str]:
    """A fresh database for this session, schema applied; dropped at the end."""
    name = f"{database_name(mysql_server_url)}_{os.getpid()}"[:64]
    url = with_database(mysql_server_url, name)
    create_database(url)
    yield applied(url)
    drop_database(url)


@pytest.fixture
def mysql_db_url(mysql_session_url: str) -> str:
    """The session's MariaDB database with every forkq table emptied."""
    empty_tables(mysql_session_url)
    return mysql_session_url


# --- SQLite ------------------------------------------------------------------------------


@pytest.fixture
def sqlite_db_url(tmp_path: Path) -> str:
    """A new SQLite file in the test's tmp_path, schema applied (absolute sqlite:////...)."""
    return applied(sqlite_url_for(tmp_path / "forkq.db"))


# --- both ----------------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS, ids=BACKENDS)
def db_url(request: pytest.FixtureRequest) -> str:
    """Each backend in turn: a URL with the schema applied and empty tables."""
    fixture = "sqlite_db_url" if request.param == "sqlite" else "mysql_db_url"
    return str(request.getfixturevalue(fixture))


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    store = open_store(db_url)
    yield store
    store.close()


@pytest.fixture
def queue(store: Store) -> Queue:
    return Queue(store=store)


# --- two databases ([databases.NAME]) --------------------------------------------------------


@pytest.fixture(params=BACKENDS, ids=BACKENDS)
def two_db_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(home, reports): two databases of one backend (two SQLite files, or two MariaDB
    databases on the shared server), schema applied to both; dropped afterwards."""
    if request.param == "sqlite":
        pair = (sqlite_url_for(tmp_path / "home.db"), sqlite_url_for(tmp_path / "reports.db"))
    else:
        server = request.getfixturevalue("mysql_server_url")
        base = f"{database_name(server)}_{os.getpid()}_two"[:58]
        pair = (with_database(server, f"{base}_home"), with_database(server, f"{base}_rep"))
        for url in pair:
            create_database(url)
    for url in pair:
        store = open_store(url)
        store.apply_schema()
        store.close()
    yield pair
    if request.param == "mysql":
        for url in pair:
            drop_database(url)
