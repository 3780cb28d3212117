"""The data contract: schema.sql, its SQLite twin, the named queries, the applied schema
and raw inserts. Upgrading older databases in place, and the schema files alone on an
old or a new database: test_schema_upgrades.py.
"""

from __future__ import annotations

import os
import re
import sqlite3

import pytest
from schema_util import (
    MYSQL_DDL,
    MYSQL_QUERIES,
    SQLITE_DDL,
    SQLITE_QUERIES,
    _job,
    declared,
    live_columns,
)
from util import (
    SCHEMA_SQL,
    SQL_DIR,
    SQLITE_SCHEMA_SQL,
    STORE_DIR,
    backend_of,
    in_ci,
    mariadb_client,
    run_mariadb_client,
    sql,
)

from supervisor import Queue
from supervisor.dburl import parse_database_url
from supervisor.errors import DatabaseError, SchemaError, TablesMissing
from supervisor.store import SCHEMA_VERSION, open_store
from supervisor.store.mysql import BATCH_INSERT_QUERIES
from supervisor.store.queries import split_script, upgrade_statements, upgrades

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
        "forkq_schedules",
        "forkq_alerts",
        "forkq_throughput",
        "forkq_handler_stats",
        "forkq_results",
        "forkq_attempts",
        "forkq_limits",
        "forkq_tenants",
        "forkq_dependencies",
        "forkq_batches",
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


def test_sqlite_can_drop_any_column_its_schema_text_allows() -> None:
    """SQLite's ALTER TABLE DROP COLUMN re-parses the stored CREATE TABLE text: a comment
    it cannot read there (a comma inside a column's comment once did) breaks every later
    upgrade or undo of that table. A drop may fail only because the column is in use."""
    base = sqlite3.connect(":memory:")
    base.executescript(SQLITE_SCHEMA_SQL.read_text())
    tables = [r[0] for r in base.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    in_use = ("cannot drop PRIMARY KEY column", "no such column", "may not be altered")
    dropped = 0
    for table in tables:
        for column in [r[1] for r in base.execute(f"PRAGMA table_info({table})")]:
            db = sqlite3.connect(":memory:")
            db.executescript(SQLITE_SCHEMA_SQL.read_text())
            try:
                db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
                dropped += 1
            except sqlite3.OperationalError as exc:
                assert any(reason in str(exc) for reason in in_use), (table, column, exc)
            db.close()
    assert dropped > 50  # most columns are free to drop: the loop really ran


def test_the_store_applies_exactly_schema_sql_on_mysql() -> None:
    # `forkq schema apply` runs the packaged copy; the contract is the file at the root.
    packaged = split_script((SQL_DIR / "mysql_schema.sql").read_text(encoding="utf-8"))
    assert packaged == split_script(SCHEMA_SQL.read_text(encoding="utf-8"))


def test_schema_statements_are_idempotent_create_if_not_exists() -> None:
    for path in (SCHEMA_SQL, SQLITE_SCHEMA_SQL):
        *creates, last = split_script(path.read_text(encoding="utf-8"))
        for statement in creates:
            assert re.match(r"CREATE (TABLE|INDEX|UNIQUE INDEX) IF NOT EXISTS ", statement), (
                statement[:60]
            )
        assert re.match(r"INSERT (OR )?IGNORE INTO forkq_schema ", last), last


def test_schema_files_alone_record_the_latest_version_if_none_is_recorded() -> None:
    # `mysql db < schema.sql` must give a database `forkq run` accepts, and must never
    # mark an older database as upgraded: the version row is inserted only if missing.
    for path in (SCHEMA_SQL, SQLITE_SCHEMA_SQL):
        last = split_script(path.read_text(encoding="utf-8"))[-1]
        match = re.fullmatch(
            r"INSERT (?:OR )?IGNORE INTO forkq_schema \(id, version\) VALUES \(1, (\d+)\);?", last
        )
        assert match, last
        assert int(match.group(1)) == SCHEMA_VERSION, path.name


@pytest.mark.parametrize("queries", [MYSQL_QUERIES, SQLITE_QUERIES], ids=["mysql", "sqlite"])
def test_every_upgrade_records_its_own_version_last(queries: dict[str, str]) -> None:
    steps = upgrades(queries)
    assert sorted(steps) == list(range(2, SCHEMA_VERSION + 1))
    for version, statements in steps.items():
        assert re.match(rf"UPDATE forkq_schema SET version = {version}\b", statements[-1]), version
        assert all(not statement.endswith(";") for statement in statements)
    assert upgrade_statements(queries, SCHEMA_VERSION) == []
    assert upgrade_statements(queries, SCHEMA_VERSION - 1) == steps[SCHEMA_VERSION]


# --- named queries ---------------------------------------------------------------------------


def test_both_backends_define_the_same_named_queries() -> None:
    assert set(MYSQL_QUERIES) >= BATCH_INSERT_QUERIES
    assert set(MYSQL_QUERIES) - BATCH_INSERT_QUERIES == set(SQLITE_QUERIES)
    assert all(text.strip() for text in {**MYSQL_QUERIES, **SQLITE_QUERIES}.values())


def test_every_query_name_the_code_uses_is_defined_for_both_backends() -> None:
    pattern = re.compile(
        r"""(?:_run|_rows|_execute_last|_execute|_fetchall)(?:\(|_on\(\s*\w+,)\s*["'](\w+)["']"""
        r"""|queries\[["'](\w+)["']\]"""
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


def test_a_producer_before_the_schema_is_told_to_apply_it(empty_db_url: str) -> None:
    """An application that enqueues before anyone ran `forkq schema apply` gets one line
    naming it, as `forkq enqueue` does; still a DatabaseError for code that catches those."""
    queue = Queue(empty_db_url)
    try:
        for enqueue in (
            lambda: queue.enqueue("t.noop", {}),
            lambda: queue.enqueue_many([{"handler": "t.noop", "payload": {}}]),
        ):
            with pytest.raises(TablesMissing) as caught:
                enqueue()
            message = str(caught.value)
            if empty_db_url.startswith("sqlite"):  # no file yet: it is not made, and said so
                assert message.startswith("no SQLite database at /"), message
                assert not os.path.exists(message.split(" at ")[1].split(":")[0])
            else:
                assert message.startswith("forkq tables are missing"), message
                assert "forkq_jobs" in message
            assert message.endswith("run `forkq schema apply`"), message
            assert isinstance(caught.value, DatabaseError) and isinstance(caught.value, SchemaError)
            assert "\n" not in message
    finally:
        queue.close()
    store = open_store(empty_db_url)
    try:
        assert store.schema_version() is None  # the same error still reads as "no tables"
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
