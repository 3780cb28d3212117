"""The data contract: schema.sql, its SQLite twin, the named queries, and raw inserts."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from util import (
    SCHEMA_SQL,
    SQLITE_SCHEMA_SQL,
    STORE_DIR,
    backend_of,
    create_database,
    database_name,
    ddl_columns,
    drop_database,
    in_ci,
    mariadb_client,
    run_mariadb_client,
    sql,
    sqlite_url_for,
    with_database,
)

from supervisor.dburl import parse_database_url
from supervisor.models import NewJob
from supervisor.queue import build_job
from supervisor.store import SCHEMA_VERSION, open_store
from supervisor.store.base import load_queries, split_script
from supervisor.store.mysql import BATCH_INSERT_QUERIES

MYSQL_DDL = ddl_columns(SCHEMA_SQL.read_text(encoding="utf-8"))
SQLITE_DDL = ddl_columns(SQLITE_SCHEMA_SQL.read_text(encoding="utf-8"))
MYSQL_QUERIES = load_queries(STORE_DIR / "mysql.sql")
SQLITE_QUERIES = load_queries(STORE_DIR / "sqlite.sql")


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
            for column in sql(url, f"PRAGMA table_info({table})")
        ]
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(table, set()).add(column)
    return out


def declared(ddl: dict[str, dict[str, str]]) -> dict[str, set[str]]:
    return {table: set(columns) for table, columns in ddl.items()}


# --- the DDL text ----------------------------------------------------------------------------


def test_schema_files_declare_every_forkq_table() -> None:
    # Guards the parser too: an empty parse would make the comparisons below vacuous.
    expected = {
        "forkq_jobs",
        "forkq_jobs_archive",
        "forkq_queues",
        "forkq_processes",
        "forkq_locks",
        "forkq_schedule_slots",
        "forkq_alerts",
        "forkq_schema",
    }
    assert set(MYSQL_DDL) == expected
    assert {"id", "queue", "handler", "payload", "status", "run_at"} <= set(MYSQL_DDL["forkq_jobs"])


def test_mysql_and_sqlite_ddl_declare_the_same_tables_and_columns() -> None:
    assert declared(SQLITE_DDL) == declared(MYSQL_DDL)


def test_every_column_and_table_in_schema_sql_has_a_comment() -> None:
    missing = [
        f"{table}.{column}"
        for table, columns in MYSQL_DDL.items()
        for column, line in columns.items()
        if not re.search(r"\bCOMMENT\s+'(?:[^']|'')+'", line)
    ]
    assert missing == []
    commented = {
        statement.split()[5]
        for statement in split_script(SCHEMA_SQL.read_text(encoding="utf-8"))
        if statement.startswith("CREATE TABLE") and "COMMENT='" in statement.splitlines()[-1]
    }
    assert commented == set(MYSQL_DDL)


def test_the_store_applies_exactly_schema_sql_on_mysql() -> None:
    # `forkq schema apply` runs the packaged copy; the contract is the file at the root.
    packaged = split_script((STORE_DIR / "mysql_schema.sql").read_text(encoding="utf-8"))
    assert packaged == split_script(SCHEMA_SQL.read_text(encoding="utf-8"))


def test_schema_statements_are_idempotent_create_if_not_exists() -> None:
    for path in (SCHEMA_SQL, SQLITE_SCHEMA_SQL):
        for statement in split_script(path.read_text(encoding="utf-8")):
            assert re.match(r"CREATE (TABLE|INDEX) IF NOT EXISTS ", statement), statement[:60]


# --- named queries ---------------------------------------------------------------------------


def test_both_backends_define_the_same_named_queries() -> None:
    assert set(MYSQL_QUERIES) >= BATCH_INSERT_QUERIES
    assert set(MYSQL_QUERIES) - BATCH_INSERT_QUERIES == set(SQLITE_QUERIES)
    assert all(text.strip() for text in {**MYSQL_QUERIES, **SQLITE_QUERIES}.values())


def test_every_query_name_the_code_uses_is_defined_for_both_backends() -> None:
    pattern = re.compile(
        r"""(?:_run|_rows|_execute|_fetchall)\(\s*["'](\w+)["']|queries\[["'](\w+)["']\]"""
    )
    used: set[str] = set()
    for path in STORE_DIR.glob("*.py"):
        used |= {a or b for a, b in pattern.findall(path.read_text(encoding="utf-8"))}
    assert {"claim_select", "claim_update", "complete_delete"} <= used  # the scan found calls
    used |= {"insert_job", "insert_job_unique"}  # chosen per job by Store.insert_query
    assert used - set(MYSQL_QUERIES) == set()
    assert used - BATCH_INSERT_QUERIES - set(SQLITE_QUERIES) == set()


# --- the live database -----------------------------------------------------------------------


def test_applied_schema_has_the_declared_columns(db_url: str) -> None:
    assert live_columns(db_url) == declared(MYSQL_DDL)


def test_applied_mysql_columns_carry_their_comments(mysql_db_url: str) -> None:
    rows = sql(
        mysql_db_url,
        "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'forkq!_%' ESCAPE '!'"
        " AND COLUMN_COMMENT = ''",
    )
    assert rows == []


def test_apply_schema_twice_is_idempotent_and_records_the_version(db_url: str) -> None:
    store = open_store(db_url)
    try:
        job_id = store.enqueue_slot("keep-me", 1_700_000_000.0, _job())
        assert store.apply_schema() == SCHEMA_VERSION
        assert store.apply_schema() == SCHEMA_VERSION
        assert store.schema_version() == SCHEMA_VERSION
        store.require_schema()
        assert job_id is not None and store.get_job(job_id) is not None  # data survives
        assert live_columns(db_url) == declared(MYSQL_DDL)
    finally:
        store.close()


def job_indexes(url: str) -> set[str]:
    if backend_of(url) == "mysql":
        rows = sql(
            url,
            "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS"
            " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'forkq_jobs'",
        )
    else:
        rows = sql(
            url, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'forkq_jobs'"
        )
    return {name for (name,) in rows}


def test_a_version_1_database_is_upgraded_in_place(db_url: str) -> None:
    """Version 1 had an index on locked_until; apply drops it and keeps every row."""
    store = open_store(db_url)
    try:
        job_id = store.enqueue(_job())
        if backend_of(db_url) == "mysql":
            sql(db_url, "ALTER TABLE forkq_jobs ADD INDEX forkq_jobs_lease (locked_until)")
        else:
            sql(db_url, "CREATE INDEX forkq_jobs_lease ON forkq_jobs (locked_until)")
        sql(db_url, "UPDATE forkq_schema SET version = 1")
        assert "forkq_jobs_lease" in job_indexes(db_url)
        assert store.require_schema() == 1  # the daemon still runs on version 1
        assert store.apply_schema() == SCHEMA_VERSION == 2
        assert store.schema_version() == 2
        assert "forkq_jobs_lease" not in job_indexes(db_url)
        assert {"forkq_jobs_claim", "forkq_jobs_status"} <= job_indexes(db_url)
        assert store.get_job(job_id) is not None
        assert store.apply_schema() == 2  # and again: nothing left to upgrade
    finally:
        store.close()


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


def test_schema_version_is_none_on_an_empty_database(empty_db_url: str) -> None:
    store = open_store(empty_db_url)
    try:
        assert store.schema_version() is None
        with pytest.raises(Exception, match="schema apply"):
            store.require_schema()
        assert store.apply_schema() == SCHEMA_VERSION
        assert store.schema_version() == SCHEMA_VERSION
    finally:
        store.close()


# --- the one-statement enqueue of any program ----------------------------------------------


RAW_INSERT = (
    "INSERT INTO forkq_jobs (queue, handler, payload)"
    """ VALUES ('email', 'email.send', '{"to": "a@example.com"}')"""
)


def raw_insert(url: str, session_time_zone: str | None) -> None:
    if backend_of(url) == "sqlite":
        conn = sqlite3.connect(parse_database_url(url).path)
        try:
            conn.execute(RAW_INSERT)
            conn.commit()
        finally:
            conn.close()
        return
    if mariadb_client() is None:
        message = "the mariadb command-line client is not installed"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    prefix = f"SET time_zone = '{session_time_zone}';\n" if session_time_zone else ""
    run_mariadb_client(url, prefix + RAW_INSERT + ";\n")


def assert_due_now_with_defaults(url: str) -> None:
    store = open_store(url)
    try:
        [job] = store.list_jobs()
        now = store.db_now()
        assert (job.queue, job.handler, job.payload) == (
            "email",
            "email.send",
            '{"to": "a@example.com"}',
        )
        assert job.status == "ready"
        assert job.priority == 0
        assert job.attempts == 0
        assert job.max_attempts is None
        assert job.unique_key is None and job.locked_by is None
        assert abs(job.run_at.timestamp() - now) < 30  # "run now", not hours off
        assert abs(job.enqueued_at.timestamp() - now) < 30
        [claimed] = store.claim("email", "tester", 10, lease=30)  # and it is due now
        assert claimed.id == job.id
    finally:
        store.close()


def test_raw_insert_gets_the_documented_defaults(db_url: str) -> None:
    raw_insert(db_url, session_time_zone=None)
    assert_due_now_with_defaults(db_url)


def test_raw_insert_from_a_session_in_another_time_zone_is_due_now(mysql_db_url: str) -> None:
    raw_insert(mysql_db_url, session_time_zone="+09:00")
    assert_due_now_with_defaults(mysql_db_url)


def _job() -> NewJob:
    return build_job("schema.keep", {"n": 1}, "default", 0.0, None, 0, None, None)
