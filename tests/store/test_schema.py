"""The data contract: schema.sql, its SQLite twin, the named queries, and raw inserts."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
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
    subprocess_env,
    with_database,
)

from supervisor.dburl import parse_database_url
from supervisor.models import NewJob
from supervisor.proc import node_id
from supervisor.queue import build_job
from supervisor.store import SCHEMA_VERSION, open_store
from supervisor.store.base import load_queries, split_script, upgrade_statements, upgrades
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
        "forkq_throughput",
        "forkq_results",
        "forkq_limits",
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
        *creates, last = split_script(path.read_text(encoding="utf-8"))
        for statement in creates:
            assert re.match(r"CREATE (TABLE|INDEX) IF NOT EXISTS ", statement), statement[:60]
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
        r"""(?:_run|_rows|_execute|_fetchall)(?:\(|_on\(\s*\w+,)\s*["'](\w+)["']"""
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
        drop_node_column(db_url)
        sql(db_url, "UPDATE forkq_schema SET version = 1")
        assert "forkq_jobs_lease" in job_indexes(db_url)
        assert store.require_schema() == 1  # the daemon still runs on version 1
        assert store.apply_schema() == SCHEMA_VERSION
        assert store.schema_version() == SCHEMA_VERSION
        assert "forkq_jobs_lease" not in job_indexes(db_url)
        assert {"forkq_jobs_claim", "forkq_jobs_status"} <= job_indexes(db_url)
        assert store.get_job(job_id) is not None
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert store.apply_schema() == SCHEMA_VERSION  # and again: nothing left to upgrade
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


# --- version 3, and the schema files alone ------------------------------------------------

STATUS_COMMENT_2 = "ready | running | done | dead"
STATUS_COMMENT_3 = "ready | scheduled | running | done | dead"


def status_comment(url: str) -> str:
    [(comment,)] = sql(
        url,
        "SELECT COLUMN_COMMENT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()"
        " AND TABLE_NAME = 'forkq_jobs' AND COLUMN_NAME = 'status'",
    )
    return str(comment)


def innodb_table_id(url: str) -> int:
    """InnoDB's id of forkq_jobs: a table that is rebuilt (copied) gets a new one."""
    [(version,)] = sql(url, "SELECT VERSION()")
    query = (
        "SELECT TABLE_ID FROM information_schema.INNODB_SYS_TABLES WHERE NAME = ?"
        if "MariaDB" in str(version)
        else "SELECT TABLE_ID FROM information_schema.INNODB_TABLES WHERE NAME = ?"
    )
    [(table_id,)] = sql(url, query, [f"{database_name(url)}/forkq_jobs"])
    return int(table_id)


def undo_version_7(url: str) -> None:
    """Take away what version 7 added (forkq_limits, forkq_jobs.snoozes and .limit_wait and
    the index forkq_jobs_limit)."""
    sql(url, "DROP TABLE forkq_limits")
    if backend_of(url) == "mysql":
        sql(
            url,
            "ALTER TABLE forkq_jobs DROP INDEX forkq_jobs_limit, DROP COLUMN snoozes,"
            " DROP COLUMN limit_wait",
        )
    else:
        sql(url, "DROP INDEX forkq_jobs_limit")
        sql(url, "ALTER TABLE forkq_jobs DROP COLUMN snoozes")
        sql(url, "ALTER TABLE forkq_jobs DROP COLUMN limit_wait")
    sql(url, "UPDATE forkq_schema SET version = 6")


def undo_version_6(url: str) -> None:
    """Take away what versions 7 and 6 added (then forkq_results)."""
    undo_version_7(url)
    sql(url, "DROP TABLE forkq_results")
    sql(url, "UPDATE forkq_schema SET version = 5")


def undo_version_5(url: str) -> None:
    """Take away what versions 6 and 5 added (then forkq_jobs.limit_key, forkq_throughput)."""
    undo_version_6(url)
    sql(url, "ALTER TABLE forkq_jobs DROP COLUMN limit_key")
    sql(url, "DROP TABLE forkq_throughput")
    sql(url, "UPDATE forkq_schema SET version = 4")


def drop_node_column(url: str) -> None:
    """Take away what versions 4 and 5 added (forkq_processes.node, then version 5's),
    as an older database has it."""
    undo_version_5(url)
    sql(url, "ALTER TABLE forkq_processes DROP COLUMN node")


def make_version_2(url: str) -> None:
    """Put the database back as version 2 left it: no `scheduled` in the status comment
    (and no forkq_processes.node, which version 4 adds)."""
    drop_node_column(url)
    if backend_of(url) == "mysql":
        sql(
            url,
            "ALTER TABLE forkq_jobs MODIFY status VARCHAR(16) NOT NULL DEFAULT 'ready'"
            " COMMENT 'ready | running | done | dead'",
        )
        assert status_comment(url) == STATUS_COMMENT_2
    sql(url, "UPDATE forkq_schema SET version = 2")


def recorded_version(url: str) -> int:
    [(version,)] = sql(url, "SELECT version FROM forkq_schema")
    return int(version)


def job_ids(url: str) -> set[int]:
    return {int(job_id) for (job_id,) in sql(url, "SELECT id FROM forkq_jobs")}


def test_a_version_2_database_is_upgraded_to_3_in_place(db_url: str) -> None:
    mysql = backend_of(db_url) == "mysql"
    store = open_store(db_url)
    try:
        store.enqueue(_job())
        store.enqueue(build_job("schema.keep", {"n": 2}, "default", 86400.0, None, 0, None, None))
        before = job_ids(db_url)
        make_version_2(db_url)
        table_id = innodb_table_id(db_url) if mysql else 0
        assert store.require_schema() == 2  # the daemon still runs on version 2
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert job_ids(db_url) == before and len(before) == 2
        if mysql:
            assert status_comment(db_url) == STATUS_COMMENT_3
            assert innodb_table_id(db_url) == table_id  # metadata only: never a table copy
        # Version 3 is safe to run twice (a DBA replaying a migration): nothing changes,
        # nothing fails.
        for statement in upgrades(store.queries)[3]:
            sql(db_url, statement)
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert job_ids(db_url) == before
        if mysql:
            assert status_comment(db_url) == STATUS_COMMENT_3
            assert innodb_table_id(db_url) == table_id
    finally:
        store.close()


def process_nodes(url: str) -> dict[str, str | None]:
    return {str(name): node for name, node in sql(url, "SELECT name, node FROM forkq_processes")}


def test_a_version_3_database_is_upgraded_to_4_and_the_daemon_runs_on_both(db_url: str) -> None:
    """Version 4 adds forkq_processes.node. On version 3 a process registers without one
    (its row is then judged by heartbeat only); after the upgrade, rows name their node."""
    drop_node_column(db_url)
    sql(db_url, "UPDATE forkq_schema SET version = 3")
    old = open_store(db_url)
    try:
        assert old.require_schema() == 3  # the daemon still runs on version 3
        old.register_process("h:1:old", "h", 1, "master", node=node_id())
        old.register_process("h:1:old", "h", 1, "master", node=node_id())  # a beat: fine
        [row] = old.list_processes()
        assert (row.name, row.node) == ("h:1:old", None)
        assert old.apply_schema() == SCHEMA_VERSION  # through 4, which adds the node
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        old.register_process("h:2:new", "h", 2, "master", node=node_id())  # the same store
        assert process_nodes(db_url) == {"h:1:old": None, "h:2:new": node_id()}
    finally:
        old.close()
    assert upgrades(MYSQL_QUERIES)[4][0].startswith("ALTER TABLE forkq_processes ADD COLUMN node ")
    assert upgrades(SQLITE_QUERIES)[4][0].startswith("ALTER TABLE forkq_processes ADD COLUMN node ")


def apply_script(url: str, script: str) -> None:
    """Run a whole SQL script as a DBA would: the mysql client, or sqlite3's own script runner."""
    if backend_of(url) == "sqlite":
        conn = sqlite3.connect(parse_database_url(url).path)
        try:
            conn.executescript(script)
        finally:
            conn.close()
        return
    if mariadb_client() is None:
        message = "the mariadb command-line client is not installed"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    run_mariadb_client(url, script)


def forkq_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m supervisor ARGS --database URL` in a subprocess, with no config file."""
    env = subprocess_env(url)
    env.pop("FORKQ_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args, "--database", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def schema_line(url: str) -> str:
    """The `schema` line of `forkq check`, which must pass."""
    result = forkq_cli(url, "check")
    assert result.returncode == 0, (result.stdout, result.stderr)
    return next(line for line in result.stdout.splitlines() if line.split()[1:2] == ["schema"])


def schema_file(url: str) -> Path:
    return SCHEMA_SQL if backend_of(url) == "mysql" else SQLITE_SCHEMA_SQL


def test_the_schema_file_alone_gives_a_database_forkq_accepts(empty_db_url: str) -> None:
    script = schema_file(empty_db_url).read_text(encoding="utf-8")
    apply_script(empty_db_url, script)
    apply_script(empty_db_url, script)  # and again: every statement is idempotent
    assert recorded_version(empty_db_url) == SCHEMA_VERSION
    assert schema_line(empty_db_url).split() == ["ok", "schema", "version", str(SCHEMA_VERSION)]
    assert live_columns(empty_db_url) == declared(MYSQL_DDL)


def test_the_schema_file_leaves_an_old_database_old_and_printed_upgrades_upgrade_it(
    empty_db_url: str,
) -> None:
    url = empty_db_url
    store = open_store(url)
    try:
        store.apply_schema()
        store.enqueue(_job())
    finally:
        store.close()
    before = job_ids(url)
    make_version_2(url)
    table_id = innodb_table_id(url) if backend_of(url) == "mysql" else 0
    if backend_of(url) == "mysql":
        apply_script(url, schema_file(url).read_text(encoding="utf-8"))
    else:
        # SQLite keeps indexes outside CREATE TABLE: version 7's forkq_jobs_limit cannot be
        # made on a forkq_jobs without limit_wait, so the file stops there (an old SQLite
        # database is upgraded by `forkq schema apply` or the printed upgrades).
        with pytest.raises(sqlite3.OperationalError, match="limit_wait"):
            apply_script(url, schema_file(url).read_text(encoding="utf-8"))
    assert recorded_version(url) == 2  # not marked upgraded by CREATE ... IF NOT EXISTS
    assert f"version 2; {SCHEMA_VERSION} is available" in schema_line(url)

    printed = forkq_cli(url, "schema", "print", "--upgrade-from", "2")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.endswith(";\n")
    statements = [part.strip() for part in printed.stdout.split(";\n") if part.strip()]
    # Only what versions 3 to 5 add: the one table new since version 2, no full DDL.
    created = {s.split()[5] for s in statements if s.startswith("CREATE TABLE IF NOT EXISTS")}
    assert created == {"forkq_throughput", "forkq_results", "forkq_limits"}
    new_tables = ("forkq_throughput", "forkq_results", "forkq_limits", "forkq_jobs_limit")
    assert not any(
        s.startswith("CREATE") and not any(table in s for table in new_tables) for s in statements
    )
    assert statements[-1].startswith(f"UPDATE forkq_schema SET version = {SCHEMA_VERSION}")
    apply_script(url, printed.stdout)
    assert recorded_version(url) == SCHEMA_VERSION
    assert schema_line(url).split() == ["ok", "schema", "version", str(SCHEMA_VERSION)]
    assert live_columns(url) == declared(MYSQL_DDL)
    assert job_ids(url) == before and before
    if backend_of(url) == "mysql":
        assert status_comment(url) == STATUS_COMMENT_3
        assert innodb_table_id(url) == table_id


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


def test_a_version_4_database_is_upgraded_to_5_in_place(db_url: str) -> None:
    """Version 5 adds forkq_jobs.limit_key (an instant ADD COLUMN) and forkq_throughput."""
    store = open_store(db_url)
    try:
        job_id = store.enqueue(_job())
        undo_version_5(db_url)
        assert "limit_key" not in live_columns(db_url)["forkq_jobs"]
        assert "forkq_throughput" not in live_columns(db_url)
        table_id = innodb_table_id(db_url) if backend_of(db_url) == "mysql" else 0
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(
            MYSQL_DDL if backend_of(db_url) == "mysql" else SQLITE_DDL
        )
        assert store.get_job(job_id) is not None
        if backend_of(db_url) == "mysql":
            assert innodb_table_id(db_url) == table_id  # no table copy
    finally:
        store.close()


def test_a_version_5_database_is_upgraded_to_6_in_place(db_url: str) -> None:
    """Version 6 adds forkq_results (task results of supervisor.contrib.django): a new
    table, so the jobs table is neither copied nor touched; before it the daemon runs
    and prunes no results."""
    store = open_store(db_url)
    try:
        job_id = store.enqueue(_job())
        undo_version_6(db_url)
        assert "forkq_results" not in live_columns(db_url)
        assert store.require_schema() == 5
        assert store.purge_results(0.0, queue="default") == 0  # no table: nothing asked
        table_id = innodb_table_id(db_url) if backend_of(db_url) == "mysql" else 0
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert store.get_job(job_id) is not None
        assert store.purge_results(0.0, queue="default") == 0  # the table is there now
        if backend_of(db_url) == "mysql":
            assert innodb_table_id(db_url) == table_id
    finally:
        store.close()


def test_a_version_6_database_is_upgraded_to_7_in_place(db_url: str) -> None:
    """Version 7 adds forkq_jobs.snoozes and .limit_wait (instant columns), the index
    forkq_jobs_limit (built online, no table copy) and forkq_limits; a job enqueued
    before is claimable after, as claimable as ever (limit_wait defaults to '')."""
    store = open_store(db_url)
    try:
        job_id = store.enqueue(_job())
        undo_version_7(db_url)
        assert {"snoozes", "limit_wait"}.isdisjoint(live_columns(db_url)["forkq_jobs"])
        assert "forkq_limits" not in live_columns(db_url)
        assert store.require_schema() == 6  # the daemon still runs on version 6
        table_id = innodb_table_id(db_url) if backend_of(db_url) == "mysql" else 0
        assert store.apply_schema() == SCHEMA_VERSION == 7
        assert recorded_version(db_url) == 7
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert "forkq_jobs_limit" in job_indexes(db_url)
        job = store.get_job(job_id)
        assert job is not None and (job.snoozes, job.limit_wait) == (0, "")
        if backend_of(db_url) == "mysql":
            assert innodb_table_id(db_url) == table_id
    finally:
        store.close()
