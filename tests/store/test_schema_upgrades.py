"""The data contract over time: every older schema version is upgraded in place by
`forkq schema apply` (keeping every row, ending with the declared columns and indexes),
and the schema files alone give a database forkq accepts or leave an old one old, with
the printed upgrade statements upgrading it. The contract itself: test_schema.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

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
    SQLITE_SCHEMA_SQL,
    backend_of,
    database_name,
    forkq_cli,
    in_ci,
    mariadb_client,
    run_mariadb_client,
    sql,
)

from supervisor.building import build_job
from supervisor.config import LimitConfig
from supervisor.dburl import parse_database_url
from supervisor.errors import SchemaError
from supervisor.models import JobRow, NewJob
from supervisor.proc import node_id
from supervisor.queue import Queue
from supervisor.store import SCHEMA_VERSION, Store, open_store
from supervisor.store.limits import claims as flow
from supervisor.store.limits.buckets import LimitPlan
from supervisor.store.queries import upgrades
from supervisor.timing import Stats


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
        assert {"forkq_jobs_limit", "forkq_jobs_status"} <= job_indexes(db_url)
        mysql = backend_of(db_url) == "mysql"
        assert ("forkq_jobs_claim" in job_indexes(db_url)) is not mysql  # 19 dropped it
        assert store.get_job(job_id) is not None
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert store.apply_schema() == SCHEMA_VERSION  # and again: nothing left to upgrade
    finally:
        store.close()


# --- version 3, and the schema files alone ------------------------------------------------

STATUS_COMMENT_2 = "ready | running | done | dead"
STATUS_COMMENT_3 = "ready | scheduled | running | done | dead"
STATUS_COMMENT_LATEST = (
    "waiting | ready | scheduled | running | cancelling | done | dead | cancelled"
)


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


def undo_version_10(url: str) -> None:
    """Take away what version 10 added (forkq_jobs.unique_for, .unique_while, .duplicates,
    .unique_live and its index forkq_jobs_unique), putting back forkq_jobs_unique_key."""
    if backend_of(url) == "mysql":
        sql(
            url,
            "ALTER TABLE forkq_jobs DROP CONSTRAINT forkq_jobs_unique_while,"
            " DROP INDEX forkq_jobs_unique, DROP COLUMN unique_live, DROP COLUMN unique_for,"
            " DROP COLUMN unique_while, DROP COLUMN duplicates,"
            " ADD UNIQUE KEY forkq_jobs_unique_key (unique_key)",
        )
    else:
        sql(url, "DROP INDEX forkq_jobs_unique")
        for column in ("unique_live", "duplicates", "unique_while", "unique_for"):
            sql(url, f"ALTER TABLE forkq_jobs DROP COLUMN {column}")
        sql(url, "CREATE UNIQUE INDEX forkq_jobs_unique_key ON forkq_jobs (unique_key)")
    sql(url, "UPDATE forkq_schema SET version = 9")


def undo_version_14(url: str) -> None:
    """Take away what version 14 added (forkq_dependencies, forkq_jobs.deps, `waiting` in
    the status comment)."""
    sql(url, "DROP TABLE forkq_dependencies")
    if backend_of(url) == "mysql":
        sql(
            url,
            "ALTER TABLE forkq_jobs DROP COLUMN deps, MODIFY status VARCHAR(16) NOT NULL"
            f" DEFAULT 'ready' COMMENT '{STATUS_COMMENT_3}'",
        )
    else:
        sql(url, "ALTER TABLE forkq_jobs DROP COLUMN deps")
    sql(url, "UPDATE forkq_schema SET version = 13")


def undo_version_11(url: str) -> None:
    """Take away what version 11 added (forkq_handler_stats)."""
    sql(url, "DROP TABLE forkq_handler_stats")
    sql(url, "UPDATE forkq_schema SET version = 10")


def undo_version_12(url: str) -> None:
    """Take away what version 12 added (forkq_attempts)."""
    sql(url, "DROP TABLE forkq_attempts")
    sql(url, "UPDATE forkq_schema SET version = 11")


def undo_version_13(url: str) -> None:
    """Take away what version 13 added (forkq_batches, forkq_jobs.batch_id and its index)."""
    sql(url, "DROP TABLE forkq_batches")
    if backend_of(url) == "mysql":
        sql(url, "ALTER TABLE forkq_jobs DROP INDEX forkq_jobs_batch, DROP COLUMN batch_id")
    else:
        sql(url, "DROP INDEX forkq_jobs_batch")
        sql(url, "ALTER TABLE forkq_jobs DROP COLUMN batch_id")
    sql(url, "UPDATE forkq_schema SET version = 12")


def undo_version_15(url: str) -> None:
    """Take away what version 15 added (forkq_tenants.served)."""
    sql(url, "ALTER TABLE forkq_tenants DROP COLUMN served")
    sql(url, "UPDATE forkq_schema SET version = 14")


def undo_version_16(url: str) -> None:
    """Take away what version 16 changed (SQLite's forkq_jobs_tenant made partial)."""
    if backend_of(url) == "sqlite":
        sql(url, "DROP INDEX forkq_jobs_tenant")
        sql(
            url,
            "CREATE INDEX forkq_jobs_tenant"
            " ON forkq_jobs (queue, status, tenant, priority DESC, run_at, id)",
        )
    sql(url, "UPDATE forkq_schema SET version = 15")


def undo_version_17(url: str) -> None:
    """Take away what version 17 changed (SQLite's forkq_jobs_unique and forkq_jobs_limit
    made partial)."""
    if backend_of(url) == "sqlite":
        sql(url, "DROP INDEX forkq_jobs_unique")
        sql(url, "CREATE UNIQUE INDEX forkq_jobs_unique ON forkq_jobs (unique_key, unique_live)")
        sql(url, "DROP INDEX forkq_jobs_limit")
        sql(
            url,
            "CREATE INDEX forkq_jobs_limit"
            " ON forkq_jobs (status, limit_wait, queue, priority DESC, run_at, id)",
        )
    sql(url, "UPDATE forkq_schema SET version = 16")


def undo_version_18(url: str) -> None:
    """Take away what version 18 changed (MariaDB's forkq_jobs_limit, _tenant and _batch on
    virtual columns): the indexes as version 17 had them."""
    if backend_of(url) == "mysql":
        sql(
            url,
            "ALTER TABLE forkq_jobs DROP INDEX forkq_jobs_limit, DROP INDEX forkq_jobs_tenant,"
            " DROP INDEX forkq_jobs_batch, DROP COLUMN ready_wait, DROP COLUMN ready_tenant,"
            " DROP COLUMN batch_status,"
            " ADD INDEX forkq_jobs_limit (status, limit_wait, queue, priority DESC, run_at, id),"
            " ADD INDEX forkq_jobs_tenant (queue, status, tenant, priority DESC, run_at, id),"
            " ADD INDEX forkq_jobs_batch (batch_id, status)",
        )
    else:
        for column in ("batch_status", "ready_tenant", "ready_wait"):  # the last first
            sql(url, f"ALTER TABLE forkq_jobs DROP COLUMN {column}")
    sql(url, "UPDATE forkq_schema SET version = 17")


def undo_version_19(url: str) -> None:
    """Take away what version 19 changed: MariaDB's forkq_jobs_claim back."""
    if backend_of(url) == "mysql":
        sql(
            url,
            "ALTER TABLE forkq_jobs"
            " ADD INDEX forkq_jobs_claim (queue, status, priority DESC, run_at, id)",
        )
    sql(url, "UPDATE forkq_schema SET version = 18")


# What each version after 9 added, taken away by undo_versions_above (numbers may have
# gaps: each records the version before its own).
UNDO_AFTER_9 = {
    10: undo_version_10,
    11: undo_version_11,
    12: undo_version_12,
    13: undo_version_13,
    14: undo_version_14,
    15: undo_version_15,
    16: undo_version_16,
    17: undo_version_17,
    18: undo_version_18,
    19: undo_version_19,
}


def undo_versions_above(url: str, version: int) -> None:
    """Take a database at SCHEMA_VERSION down to `version` (>= 9), the newest first."""
    for number in sorted(UNDO_AFTER_9, reverse=True):
        if number > version:
            UNDO_AFTER_9[number](url)


def undo_version_9(url: str) -> None:
    """Take away what the versions after 8 added (then forkq_schedules)."""
    undo_versions_above(url, 9)
    sql(url, "DROP TABLE forkq_schedules")
    sql(url, "UPDATE forkq_schema SET version = 8")


def undo_version_8(url: str) -> None:
    """Take away what versions 9 and 8 added (then forkq_tenants, forkq_jobs.group_key,
    .tags, .progress and .tenant and the index forkq_jobs_tenant)."""
    undo_version_9(url)
    sql(url, "DROP TABLE forkq_tenants")
    if backend_of(url) == "mysql":
        sql(
            url,
            "ALTER TABLE forkq_jobs DROP INDEX forkq_jobs_tenant, DROP COLUMN tenant,"
            " DROP COLUMN group_key, DROP COLUMN tags, DROP COLUMN progress",
        )
    else:
        sql(url, "DROP INDEX forkq_jobs_tenant")
        for column in ("progress", "tags", "tenant", "group_key"):  # the last first
            sql(url, f"ALTER TABLE forkq_jobs DROP COLUMN {column}")
    sql(url, "UPDATE forkq_schema SET version = 7")


def undo_version_7(url: str) -> None:
    """Take away what versions 9, 8 and 7 added (then forkq_limits, forkq_jobs.snoozes and
    .limit_wait and the index forkq_jobs_limit)."""
    undo_version_8(url)
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


def upgrade_to_9_in_place(url: str) -> None:
    """On MySQL/MariaDB: run the upgrades up to version 9 and see that none copied the
    jobs table (version 10 does: it adds a stored column after the virtual tenant)."""
    if backend_of(url) != "mysql":
        return
    table_id = innodb_table_id(url)
    version = recorded_version(url)
    for number, statements in sorted(upgrades(MYSQL_QUERIES).items()):
        if version < number < 10:
            for statement in statements:
                sql(url, statement)
    assert innodb_table_id(url) == table_id  # metadata or online changes: never a copy


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
        assert store.require_schema() == 2  # the daemon still runs on version 2
        upgrade_to_9_in_place(db_url)
        assert store.apply_schema() == SCHEMA_VERSION
        applied = innodb_table_id(db_url) if mysql else 0
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert job_ids(db_url) == before and len(before) == 2
        if mysql:
            assert status_comment(db_url).startswith(STATUS_COMMENT_LATEST)
        # Version 3 is safe to run twice (a DBA replaying a migration): nothing changes,
        # nothing fails.
        for statement in upgrades(store.queries)[3]:
            sql(db_url, statement)
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert job_ids(db_url) == before
        if mysql:  # version 3's own comment again (version 14 wrote a later one)
            assert status_comment(db_url) == STATUS_COMMENT_3
            assert innodb_table_id(db_url) == applied
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
    assert upgrades(MYSQL_QUERIES)[4][0].startswith(
        "ALTER TABLE forkq_processes ADD COLUMN IF NOT EXISTS node "
    )
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


def schema_line(url: str, exit_status: int = 0) -> str:
    """The `schema` line of `forkq check`, which exits `exit_status` (78: as `forkq run`
    refuses a database with an older schema)."""
    result = forkq_cli(url, "check")
    assert result.returncode == exit_status, (result.stdout, result.stderr)
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
    if backend_of(url) == "mysql":
        apply_script(url, schema_file(url).read_text(encoding="utf-8"))
    else:
        # SQLite keeps indexes outside CREATE TABLE: version 7's forkq_jobs_limit cannot be
        # made on a forkq_jobs without limit_wait, so the file stops there (an old SQLite
        # database is upgraded by `forkq schema apply` or the printed upgrades).
        with pytest.raises(sqlite3.OperationalError, match="limit_wait"):
            apply_script(url, schema_file(url).read_text(encoding="utf-8"))
    assert recorded_version(url) == 2  # not marked upgraded by CREATE ... IF NOT EXISTS
    line = schema_line(url, 78)
    assert line.startswith("FAIL") and f"version 2, this forkq needs {SCHEMA_VERSION}" in line

    printed = forkq_cli(url, "schema", "print", "--upgrade-from", "2")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.endswith(";\n")
    statements = [part.strip() for part in printed.stdout.split(";\n") if part.strip()]
    # Only what versions 3 to 5 add: the one table new since version 2, no full DDL.
    created = {s.split()[5] for s in statements if s.startswith("CREATE TABLE IF NOT EXISTS")}
    assert created == {
        "forkq_throughput",
        "forkq_results",
        "forkq_limits",
        "forkq_tenants",
        "forkq_schedules",
        "forkq_dependencies",
        "forkq_batches",
        "forkq_handler_stats",
        "forkq_attempts",
    }
    new_tables = (
        "forkq_throughput",
        "forkq_results",
        "forkq_limits",
        "forkq_jobs_limit",
        "forkq_tenants",
        "forkq_jobs_tenant",
        "forkq_schedules",
        "forkq_jobs_unique",
        "forkq_dependencies",
        "forkq_batches",
        "forkq_jobs_batch",
        "forkq_handler_stats",
        "forkq_attempts",
        *(("forkq_jobs_v10", "ON forkq_jobs (") if backend_of(url) == "sqlite" else ()),
    )  # SQLite's version 10 rebuilds forkq_jobs: its indexes are made again
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
        assert status_comment(url).startswith(STATUS_COMMENT_LATEST)


def test_a_version_4_database_is_upgraded_to_5_in_place(db_url: str) -> None:
    """Version 5 adds forkq_jobs.limit_key (an instant ADD COLUMN) and forkq_throughput."""
    store = open_store(db_url)
    try:
        job_id = store.enqueue(_job())
        undo_version_5(db_url)
        assert "limit_key" not in live_columns(db_url)["forkq_jobs"]
        assert "forkq_throughput" not in live_columns(db_url)
        upgrade_to_9_in_place(db_url)
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(
            MYSQL_DDL if backend_of(db_url) == "mysql" else SQLITE_DDL
        )
        assert store.get_job(job_id) is not None
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
        upgrade_to_9_in_place(db_url)
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert store.get_job(job_id) is not None
        assert store.purge_results(0.0, queue="default") == 0  # the table is there now
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
        upgrade_to_9_in_place(db_url)
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert "forkq_jobs_limit" in job_indexes(db_url)
        job = store.get_job(job_id)
        assert job is not None and (job.snoozes, job.limit_wait) == (0, "")
    finally:
        store.close()


def test_a_version_7_database_is_upgraded_to_8_in_place(db_url: str) -> None:
    """Version 8 adds forkq_jobs.group_key and the generated column tenant (instant
    columns), the index forkq_jobs_tenant (built online, no table copy) and forkq_tenants;
    a job enqueued before gets its limit_key as its tenant, and is claimable as ever."""
    store = open_store(db_url)
    try:
        keyed = store.enqueue(
            build_job("schema.keep", {}, "default", 0.0, None, 0, None, None, limit_key="shop-1")
        )
        undo_version_8(db_url)
        assert {"group_key", "tenant", "tags", "progress"}.isdisjoint(
            live_columns(db_url)["forkq_jobs"]
        )
        assert "forkq_tenants" not in live_columns(db_url)
        assert store.require_schema() == 7  # the daemon still runs on version 7
        plain = store.enqueue(_job())  # a producer on version 7
        upgrade_to_9_in_place(db_url)
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert "forkq_jobs_tenant" in job_indexes(db_url)
        tenants = dict(sql(db_url, "SELECT id, tenant FROM forkq_jobs"))
        assert tenants == {keyed: "shop-1", plain: ""}
        assert sorted(job.id for job in store.claim("default", "t", 10, lease=30)) == [keyed, plain]
    finally:
        store.close()


def test_a_version_8_database_is_upgraded_to_9_in_place(db_url: str) -> None:
    """Version 9 adds forkq_schedules (no table copy); a job enqueued before keeps its row
    and has no tags (version 8 added the column)."""
    store = open_store(db_url)
    try:
        job_id = store.enqueue(_job())
        undo_version_9(db_url)
        assert "forkq_schedules" not in live_columns(db_url)
        upgrade_to_9_in_place(db_url)
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        job = store.get_job(job_id)
        assert job is not None and job.tags is None
        assert store.runtime_schedules() == []
    finally:
        store.close()


def test_a_version_9_database_is_upgraded_to_10_with_its_keys_held(db_url: str) -> None:
    """Version 10 copies forkq_jobs (MariaDB: ALGORITHM=COPY; SQLite: a rebuild), keeping
    every row and id: a key held before is held after (as `kept`), ids are never reused
    (SQLite's sequence kept past a deleted last job), and windows work from then on."""
    store = open_store(db_url)
    try:
        keyed = store.enqueue(_job_with_key("before"))
        last = store.enqueue(_job())
        sql(db_url, "DELETE FROM forkq_jobs WHERE id = ?", [last])  # the sequence is past it
        undo_versions_above(db_url, 9)
        assert {"unique_for", "unique_live"}.isdisjoint(live_columns(db_url)["forkq_jobs"])
        assert store.require_schema() == 9
        assert store.apply_schema() == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert "forkq_jobs_unique" in job_indexes(db_url)
        assert "forkq_jobs_unique_key" not in job_indexes(db_url)
        again = store.enqueue(_job_with_key("before"))
        assert again == keyed and again.conflicted
        fresh = store.enqueue(_job())
        assert fresh > last  # no id of a job that was is given again
        assert store.get_job(keyed) is not None
    finally:
        store.close()


def _job_with_key(key: str) -> NewJob:
    return build_job("schema.keep", {}, "default", 0.0, None, 0, key, None)


def test_a_version_13_database_is_upgraded_to_14_in_place(db_url: str) -> None:
    """Version 14 adds forkq_dependencies and forkq_jobs.deps without a table copy (the
    virtual column tenant and its index are made again after deps); jobs enqueued before
    keep their rows, end as they did, and fair claims find their index."""
    store = open_store(db_url)
    try:
        keyed = store.enqueue(build_job("t", None, "default", 0, None, 0, None, None, "shop-1"))
        undo_versions_above(db_url, 13)
        assert "forkq_dependencies" not in live_columns(db_url)
        assert "deps" not in live_columns(db_url)["forkq_jobs"]
        table_id = innodb_table_id(db_url) if backend_of(db_url) == "mysql" else 0
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert "forkq_jobs_tenant" in job_indexes(db_url)
        assert dict(sql(db_url, "SELECT id, tenant FROM forkq_jobs")) == {keyed: "shop-1"}
        [row] = store.claim("default", "t", 10, lease=30)
        assert store.complete("t", [row.id], "keep") == 1
        if backend_of(db_url) == "mysql":
            assert innodb_table_id(db_url) == table_id  # instant and online: no table copy
            assert status_comment(db_url).startswith(STATUS_COMMENT_LATEST)
    finally:
        store.close()


def test_a_version_14_database_is_upgraded_to_15_in_place(db_url: str) -> None:
    """Version 15 adds forkq_tenants.served (a fair pool's weights): a tenant in a round
    before keeps its row and its turn, with no claims counted in it."""
    store = open_store(db_url)
    try:
        job = build_job("schema.keep", {}, "fair", 0.0, None, 0, None, None, group_key="shop-1")
        store.enqueue(job)
        undo_versions_above(db_url, 14)
        assert "served" not in live_columns(db_url)["forkq_tenants"]
        table_id = innodb_table_id(db_url) if backend_of(db_url) == "mysql" else 0
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert sql(db_url, "SELECT tenant, last_served, served FROM forkq_tenants") == [
            ("shop-1", 0, 0)
        ]
        if backend_of(db_url) == "mysql":
            assert innodb_table_id(db_url) == table_id  # forkq_jobs untouched
    finally:
        store.close()


def _partial_job_indexes(url: str) -> set[str]:
    """SQLite's partial indexes of forkq_jobs (PRAGMA index_list's last column)."""
    return {row[1] for row in sql(url, "PRAGMA index_list(forkq_jobs)") if row[4]}


def test_a_version_16_database_is_upgraded_to_17_and_keys_are_still_held(db_url: str) -> None:
    """Version 17 makes SQLite's forkq_jobs_unique and forkq_jobs_limit partial: a job
    without a key, whose claim and end change unique_live's inputs, has no entry to
    rewrite, and a job that is not ready has none in the limits' index (as with the
    tenant and batch indexes), while a job's key is held as before, through the upgrade
    and after it. MariaDB records the version."""
    sqlite = backend_of(db_url) == "sqlite"
    partial = {"forkq_jobs_unique", "forkq_jobs_limit", "forkq_jobs_tenant", "forkq_jobs_batch"}
    new_in_17 = {"forkq_jobs_unique", "forkq_jobs_limit"}
    store = open_store(db_url)
    try:
        if sqlite:
            assert _partial_job_indexes(db_url) == partial  # a fresh database's
        keyed = store.enqueue(_job_with_key("held"))
        plain = store.enqueue(_job())
        undo_versions_above(db_url, 16)
        if sqlite:
            assert _partial_job_indexes(db_url) == partial - new_in_17
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        if sqlite:
            assert _partial_job_indexes(db_url) == partial
        again = store.enqueue(_job_with_key("held"))
        assert again == keyed and again.conflicted
        rows = store.claim("default", "t", 10, lease=30)
        assert sorted(r.id for r in rows) == sorted([keyed, plain])
        assert store.complete("t", [keyed, plain], "keep") == 2
        assert store.enqueue(_job_with_key("held")) == keyed  # its kept row holds the key
    finally:
        store.close()


def test_a_version_12_database_is_upgraded_to_13_and_its_jobs_are_in_no_batch(db_url: str) -> None:
    """Version 13 adds forkq_batches and forkq_jobs.batch_id (on MariaDB a rebuild of the
    jobs table: no column is added instantly after version 8's indexed virtual column)."""
    store = open_store(db_url)
    try:
        job_id = store.enqueue(_job())
        undo_versions_above(db_url, 12)
        assert "forkq_batches" not in live_columns(db_url)
        assert store.apply_schema() == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        job = store.get_job(job_id)
        assert job is not None and job.batch_id is None
        assert store.batch_status(1) is None
    finally:
        store.close()


def test_a_version_9_database_is_upgraded_to_11_and_times_handlers_only_then(db_url: str) -> None:
    """Version 11 adds forkq_handler_stats; before it a heartbeat's timing is dropped (the
    daemon still runs), after it the rows add up per minute, handler and host."""
    store = open_store(db_url)
    try:
        undo_versions_above(db_url, 10)
        assert "forkq_handler_stats" not in live_columns(db_url)
        stats = {"h.one": Stats(1, 0, 0.5, 0.5, 0.5, [0] * 9 + [1] + [0] * 14)}
        assert store.record_handler_stats(60.0, "host-a", stats) == 0
        assert store.handler_stats(3600) == []
        assert store.apply_schema() == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        now = store.db_now() // 60 * 60
        assert store.record_handler_stats(now, "host-a", stats) == 1
        assert store.record_handler_stats(now, "host-a", stats) == 1
        [(handler, merged)] = store.handler_stats(3600)
        assert (handler, merged.jobs, merged.buckets[9], merged.seconds) == ("h.one", 2, 2, 1.0)
    finally:
        store.close()


def test_a_version_11_database_is_upgraded_to_12_in_place(db_url: str) -> None:
    """Version 12 adds forkq_attempts (a new table: forkq_jobs is not copied); a job
    enqueued before has no recorded attempt, and one can be recorded after."""
    from supervisor.store.results import AttemptEnd

    store = open_store(db_url)
    try:
        job_id = store.enqueue(_job())
        undo_versions_above(db_url, 11)
        assert "forkq_attempts" not in live_columns(db_url)
        fresh = open_store(db_url)  # asks the version anew
        try:
            assert fresh.job_attempts(job_id) == []  # version 9: nothing to read, no error
        finally:
            fresh.close()
        if backend_of(db_url) == "mysql":  # version 12 alone: a new table, no copy
            table_id = innodb_table_id(db_url)
            for statement in upgrades(MYSQL_QUERIES)[12]:
                sql(db_url, statement)
            assert innodb_table_id(db_url) == table_id
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        upgraded = open_store(db_url)
        try:
            upgraded.record_attempt(
                AttemptEnd(job_id, 1, "default", "retry", "h:7:ab", "boom", None)
            )
            [row] = upgraded.job_attempts(job_id)
            assert (row["outcome"], row["host"], row["pid"], row["error"]) == (
                "retry",
                "h",
                7,
                "boom",
            )
        finally:
            upgraded.close()
    finally:
        store.close()


def _indexed(url: str, index: str, columns: str) -> list[tuple[object, ...]]:
    """The entries of one of forkq_jobs' indexes, read from the index alone."""
    return [
        tuple(row)
        for row in sql(url, f"SELECT {columns} FROM forkq_jobs FORCE INDEX ({index}) ORDER BY id")
    ]


def test_a_version_18_database_is_upgraded_to_19_in_place(db_url: str) -> None:
    """Version 19 drops MariaDB's forkq_jobs_claim, instantly (no table copy): claims read
    forkq_jobs_limit's ready range in the same order, so the jobs enqueued before the
    upgrade are claimed as they were, highest priority first. SQLite records the version."""
    store = open_store(db_url)
    try:
        low = store.enqueue(_job())
        high = store.enqueue(build_job("schema.keep", {}, "default", 0.0, None, 5, None, None))
        undo_versions_above(db_url, 18)
        mysql = backend_of(db_url) == "mysql"
        assert "forkq_jobs_claim" in job_indexes(db_url)
        table_id = innodb_table_id(db_url) if mysql else 0
        assert store.apply_schema() == SCHEMA_VERSION == 19
        assert ("forkq_jobs_claim" in job_indexes(db_url)) is not mysql
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert [row.id for row in store.claim("default", "t", 10, lease=30)] == [high, low]
        if mysql:
            assert innodb_table_id(db_url) == table_id
    finally:
        store.close()


def test_a_version_17_database_is_upgraded_to_18_in_place(db_url: str) -> None:
    """Version 18 moves MariaDB's limits, tenant and batch indexes onto virtual columns that
    stay NULL where a job needs no entry: a plain job's end changes none of them (its claim
    only moves it out of the ready ones), so InnoDB leaves them alone. The upgrade is
    instant and online (no table copy), and the jobs enqueued before are found through the
    new indexes: a tenant's job by a fair claim, a job a claim parked on its limit's bucket
    by the next claim once the slot is free. SQLite (partial indexes since 16 and 17)
    records the version."""
    mysql = backend_of(db_url) == "mysql"
    store = open_store(db_url)
    plan = LimitPlan(
        (LimitConfig("mail", handlers=("m.send",), concurrency=1, per_key=True),),
        {"m.send": "email"},
    )
    try:
        fair = store.enqueue(
            build_job("schema.keep", {}, "fair", 0.0, None, 0, None, None, group_key="shop-1")
        )
        plain = store.enqueue(_job())
        first, parked = store.insert_many([NewJob("m.send", "{}", "email", limit_key="shop-1")] * 2)
        # The limit's one slot goes to the first; the claim parks the second on its bucket.
        assert [row.id for row in _limited_claim(store, plan)] == [first]
        undo_versions_above(db_url, 17)
        table_id = innodb_table_id(db_url) if mysql else 0
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(db_url) == SCHEMA_VERSION
        assert live_columns(db_url) == declared(MYSQL_DDL)
        assert store.rows("limit_waiting", limit=10) == [{"limit_wait": "mail/shop-1", "n": 1}]
        assert store.complete("t", [first], "keep") == 1
        plan.ended("m.send", "email", "shop-1")
        assert [row.id for row in _limited_claim(store, plan)] == [parked]
        [row] = store.claim("default", "t", 10, lease=30)
        assert row.id == plain
        if not mysql:
            return
        assert innodb_table_id(db_url) == table_id  # instant and online: no table copy
        tenants = [(fair, "shop-1"), (plain, None), (first, None), (parked, None)]
        buckets = [(fair, ""), (plain, None), (first, None), (parked, None)]
        assert _indexed(db_url, "forkq_jobs_tenant", "id, ready_tenant") == tenants
        assert _indexed(db_url, "forkq_jobs_limit", "id, ready_wait") == buckets
        assert store.complete("t", [plain], "keep") == 1
        # The end of a plain job: every entry as it was after the claim.
        assert _indexed(db_url, "forkq_jobs_tenant", "id, ready_tenant") == tenants
        assert _indexed(db_url, "forkq_jobs_limit", "id, ready_wait") == buckets
        assert _indexed(db_url, "forkq_jobs_batch", "id, batch_status") == [
            (job_id, None) for job_id, _ in tenants
        ]
    finally:
        store.close()


def _limited_claim(store: Store, plan: LimitPlan) -> list[JobRow]:
    plan.next_look = 0.0  # look at the due buckets now, not after the plan's 0.1 s
    return flow.complete_and_claim(store, plan, {}, "email", "t", 10, 30)[0]


@pytest.mark.parametrize("done", [1, 2, 3])
def test_an_upgrade_to_18_stopped_half_way_is_finished_by_the_next_apply(
    mysql_db_url: str, done: int
) -> None:
    """MariaDB's upgrade to 18 is three ALTERs (drop the indexes, add the columns, build the
    indexes again), and the last takes the time of an index build: one stopped after any of
    them (a lost connection, an operator's Ctrl-C, a metadata lock waited on too long) is
    finished by the next `forkq schema apply`, which otherwise failed on the first ALTER
    ("Can't DROP INDEX"), with the limits, tenant and batch indexes gone."""
    url = mysql_db_url
    store = open_store(url)
    try:
        fresh = {index: columns(url, index) for index in sorted(job_indexes(url))}
        job_id = store.enqueue(_job())
        undo_versions_above(url, 17)
        for statement in upgrades(MYSQL_QUERIES)[18][:done]:
            sql(url, statement)
        assert recorded_version(url) == 17
        assert store.apply_schema() == SCHEMA_VERSION
        assert recorded_version(url) == SCHEMA_VERSION
        assert {index: columns(url, index) for index in sorted(job_indexes(url))} == fresh
        assert live_columns(url) == declared(MYSQL_DDL)
        assert store.get_job(job_id) is not None
    finally:
        store.close()


def down_to(url: str, version: int) -> None:
    """Take a MariaDB database at SCHEMA_VERSION down to `version` (>= 3)."""
    if version >= 9:
        undo_versions_above(url, version)
    elif version == 3:
        drop_node_column(url)
        sql(url, "UPDATE forkq_schema SET version = 3")
    else:
        undo = {
            8: undo_version_9,
            7: undo_version_8,
            6: undo_version_7,
            5: undo_version_6,
            4: undo_version_5,
        }
        undo[version](url)
    assert recorded_version(url) == version


# 18 (three ALTERs) stopped after each: test_an_upgrade_to_18_stopped_half_way_...
@pytest.mark.parametrize("version", [4, 5, 7, 8, 10, 13, 14])
def test_an_upgrade_stopped_before_it_recorded_its_version_is_run_again_whole(
    mysql_db_url: str, version: int
) -> None:
    """Every statement of a MariaDB upgrade can run again: an upgrade that did all but
    record its version (a lost connection, an operator's Ctrl-C) leaves the database at
    the old version, and the next `forkq schema apply` runs every statement a second time
    and ends as a fresh database; before, it failed on the first (a duplicate column, or
    "Can't DROP INDEX"), and the operator had to finish the upgrade by hand."""
    url = mysql_db_url
    store = open_store(url)
    try:
        fresh = {index: columns(url, index) for index in sorted(job_indexes(url))}
        job_id = store.enqueue(_job())
        down_to(url, version - 1)
        *statements, record = upgrades(MYSQL_QUERIES)[version]
        assert record.startswith("UPDATE forkq_schema SET version")
        for statement in statements:
            sql(url, statement)
        assert recorded_version(url) == version - 1
        assert store.apply_schema() == SCHEMA_VERSION
        assert {index: columns(url, index) for index in sorted(job_indexes(url))} == fresh
        assert live_columns(url) == declared(MYSQL_DDL)
        assert store.get_job(job_id) is not None
    finally:
        store.close()


def columns(url: str, index: str) -> list[str]:
    """The columns of one of forkq_jobs' indexes, in order (MariaDB)."""
    rows = sql(
        url,
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()"
        " AND TABLE_NAME = 'forkq_jobs' AND INDEX_NAME = ? ORDER BY SEQ_IN_INDEX",
        [index],
    )
    return [str(name) for (name,) in rows]


def test_forkq_work_on_a_version_17_database_names_schema_apply(
    mysql_db_url: str, tmp_path: Path
) -> None:
    """`forkq work` needs the latest schema, as `forkq run` does: its claims and chores read
    what the latest adds (on MariaDB, version 18's ready_tenant in a fair pool's claim). It
    ran on any version, and on 17 each claim of a fair pool failed on an unknown column."""
    url = mysql_db_url
    store = open_store(url)
    try:
        store.enqueue(
            build_job("schema.keep", {}, "fair", 0.0, None, 0, None, None, group_key="shop-1")
        )
        undo_versions_above(url, 17)
        config = tmp_path / "forkq.toml"
        config.write_text("[pools.fair]\nfair = true\n")
        result = forkq_cli(url, "work", "-c", str(config), "--queues", "fair", "--burst")
        assert result.returncode == 78, (result.stdout, result.stderr)  # as `forkq run`
        [line] = result.stderr.strip().splitlines()
        assert line.startswith("forkq: error: the database has forkq schema version 17"), line
        assert f"run `forkq schema apply -c {config} --database " in line, line  # as given
    finally:
        store.apply_schema()  # the session's database, for the next tests
        store.close()


def test_a_batch_on_a_version_17_mariadb_is_refused_before_any_job(mysql_db_url: str) -> None:
    """On MariaDB a batch's counts read version 18's batch_status (forkq_jobs_batch). An
    application upgraded before its database opened the batch and enqueued its jobs, then
    failed on that column as the block ended: the batch, never sealed, never settled and its
    callbacks never ran, even after the upgrade. Now `q.batch()` says what to do first."""
    url = mysql_db_url
    store = open_store(url)
    try:
        undo_versions_above(url, 17)
        queue = Queue(store=store)
        refused = pytest.raises(SchemaError, match="version 18: run `forkq schema apply`")
        with refused, queue.batch(on_complete="schema.keep") as batch:
            batch.enqueue("schema.keep", {})
        assert sql(url, "SELECT COUNT(*) FROM forkq_jobs") == [(0,)]
        assert sql(url, "SELECT COUNT(*) FROM forkq_batches") == [(0,)]
        with pytest.raises(SchemaError, match="version 18"):
            queue.batch_status(1)
        assert store.apply_schema() == SCHEMA_VERSION
        with queue.batch(on_complete="schema.keep") as batch:  # the same store, upgraded
            batch.enqueue("schema.keep", {})
        assert queue.batch_status(batch.id) is not None
    finally:
        store.apply_schema()  # the session's database, for the next tests
        store.close()


def test_forkq_status_of_limits_on_a_version_17_mariadb_names_schema_apply(
    mysql_db_url: str, tmp_path: Path
) -> None:
    """`forkq status` counts the jobs waiting on [limits] on version 18's ready_wait (on
    MariaDB): on 17 it said only "Unknown column 'ready_wait'"."""
    url = mysql_db_url
    store = open_store(url)
    try:
        undo_versions_above(url, 17)
        config = tmp_path / "forkq.toml"
        config.write_text('[limits.mail]\nqueues = ["mail"]\nconcurrency = 2\n')
        result = forkq_cli(url, "status", "-c", str(config))
        assert result.returncode == 1, (result.stdout, result.stderr)
        [line] = result.stderr.strip().splitlines()
        assert f"schema version 18: run `forkq schema apply -c {config} --database URL`" in line, (
            line
        )
    finally:
        store.apply_schema()  # the session's database, for the next tests
        store.close()
    assert forkq_cli(url, "status", "-c", str(config)).returncode == 0
