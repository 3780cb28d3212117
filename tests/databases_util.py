"""A second database beside the test's own (`db_url`), for the tests of queues spread over
several databases (`[databases.NAME]`): a SQLite file next to the first, or a MariaDB
database of its own on the same server, schema applied, dropped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from util import (
    applied,
    create_database,
    database_name,
    drop_database,
    sqlite_url_for,
    with_database,
)


@pytest.fixture(name="reports_url")
def reports_url_fixture(db_url: str, tmp_path: Path) -> Iterator[str]:
    """The database `reports`, of the same backend as `db_url`."""
    sqlite = db_url.startswith("sqlite")
    if sqlite:
        url = sqlite_url_for(tmp_path / "reports.db")
    else:
        url = with_database(db_url, f"{database_name(db_url)}_reports"[:64])
        create_database(url)
    yield applied(url)
    if not sqlite:
        drop_database(url)


def databases_toml(url: str, queues: tuple[str, ...] = ("reports",)) -> str:
    """The config lines that put `queues` in the database `reports` at `url`."""
    listed = ", ".join(f'"{q}"' for q in queues)
    return f'\n[databases.reports]\nurl = "{url}"\nqueues = [{listed}]\n'
