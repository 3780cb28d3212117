"""What the schema tests share (test_schema.py, test_schema_upgrades.py): the columns the
DDL files declare, the named queries of both backends, the columns a live database
reports, and a job to store.
"""

from __future__ import annotations

from util import (
    SCHEMA_SQL,
    SQL_DIR,
    SQLITE_SCHEMA_SQL,
    backend_of,
    ddl_columns,
    sql,
)

from supervisor.building import build_job
from supervisor.models import NewJob
from supervisor.store.queries import load_queries

MYSQL_DDL = ddl_columns(SCHEMA_SQL.read_text(encoding="utf-8"))
SQLITE_DDL = ddl_columns(SQLITE_SCHEMA_SQL.read_text(encoding="utf-8"))
MYSQL_QUERIES = load_queries(SQL_DIR / "mysql.sql")
SQLITE_QUERIES = load_queries(SQL_DIR / "sqlite.sql")


def live_columns(url: str) -> dict[str, set[str]]:
    """{table: columns} of forkq's tables as the database itself reports them."""
    if backend_of(url) == "mysql":
        rows = sql(
            url,
            "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS"
            " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'forkq!_%' ESCAPE '!'",
        )
    else:
        tables = sql(
            url, "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'forkq_%'"
        )
        rows = [
            (table, column[1])
            for (table,) in tables
            for column in sql(url, f"PRAGMA table_xinfo({table})")  # generated columns too
        ]
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(table, set()).add(column)
    return out


def declared(ddl: dict[str, dict[str, str]]) -> dict[str, set[str]]:
    return {table: set(columns) for table, columns in ddl.items()}


def _job() -> NewJob:
    return build_job("schema.keep", {"n": 1}, "default", 0.0, None, 0, None, None)
