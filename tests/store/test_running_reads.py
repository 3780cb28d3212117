"""What the master reads when a child exits (held_by) and on its lease sweep
(expired_leases), and what `forkq status` and the check tick read to count running jobs:
the running range of the status index, whatever the table holds and whatever the
optimizer's statistics say.

Seen in a drain of 30,000 jobs on MariaDB: the running range was full of delete-marked
entries, the optimizer guessed it large and read the whole table in id order instead,
90 ms for every recycled child (every 1,000 jobs, in the master's loop). SQLite, once
ANALYZE had run, chose the same scan.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from util import backend_of, connected, mysql_connect

from supervisor.models import NewJob
from supervisor.store import Store, open_store

READY = 4_000
CLAIMED = 1_500  # so many running that the range no longer looks small next to the table


@pytest.fixture
def busy_store(db_url: str) -> Iterator[Store]:
    """READY jobs, CLAIMED of them running, claimed by the product's own claims."""
    store = open_store(db_url)
    store.insert_many([NewJob("t.noop", "{}", queue="s")] * READY)
    for _ in range(CLAIMED // 100):
        assert len(store.claim("s", "host:1:a", 100, 60.0)) == 100
    yield store
    store.close()


def mysql_reads(db_url: str, statement: str, params: dict[str, Any]) -> dict[str, int]:
    conn = mysql_connect(db_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute("ANALYZE TABLE forkq_jobs")
            cursor.fetchall()
            cursor.execute("FLUSH STATUS")
            cursor.execute(statement, params)
            cursor.fetchall()
            cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
            return {name: int(value) for name, value in cursor.fetchall()}
    finally:
        conn.close()


def sqlite_plan(db_url: str, statement: str, params: dict[str, Any]) -> list[str]:
    with connected(db_url) as conn:
        conn.execute("ANALYZE")  # statistics that say `status` has few values
        return [row[-1] for row in conn.execute("EXPLAIN QUERY PLAN " + statement, params)]


@pytest.mark.parametrize("name", ["held_by", "expired_leases"])
def test_the_master_reads_the_running_range_not_the_table(
    db_url: str, busy_store: Store, name: str
) -> None:
    statement = busy_store.queries[name]
    params = {"owner": "host:2:b", "limit": 100, "now": 0.0}
    assert busy_store.held_by("host:2:b") == []
    assert len(busy_store.held_by("host:1:a")) == CLAIMED
    if backend_of(db_url) == "mysql":
        reads = mysql_reads(db_url, statement, params)
        assert reads["Handler_read_rnd_next"] == 0, reads  # no table scan
        assert reads["Handler_read_first"] == 0, reads  # no full index scan
        assert reads["Handler_read_next"] <= CLAIMED + 2, reads  # the running range only
    else:
        plan = sqlite_plan(db_url, statement, params)
        assert plan[0].startswith("SEARCH forkq_jobs USING INDEX forkq_jobs_status"), plan


@pytest.mark.parametrize("name", ["stats_queue", "stats_queue_exact"])
def test_the_running_count_of_status_reads_the_running_range(mysql_db_url: str, name: str) -> None:
    """`forkq status` and the check tick count running jobs from their rows (started_at):
    the status index's range, not the table, however large the range looks."""
    store = open_store(mysql_db_url)
    try:
        store.insert_many([NewJob("t.noop", "{}", queue="s")] * READY)
        for _ in range(CLAIMED // 100):
            store.claim("s", "host:1:a", 100, 60.0)
        statement = store.queries[name]
    finally:
        store.close()
    conn = mysql_connect(mysql_db_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute("ANALYZE TABLE forkq_jobs")
            cursor.fetchall()
            cursor.execute("EXPLAIN " + statement, {"queue": "s", "limit": 11, "minor_limit": 11})
            plan = [row for row in cursor.fetchall() if row[2] == "forkq_jobs"]
    finally:
        conn.close()
    assert plan and all(row[3] not in ("ALL", "index") for row in plan), plan


def test_listing_a_rare_status_reads_its_range_not_the_table(db_url: str) -> None:
    """`forkq jobs --status dead` among thousands of done jobs: the few dead ones, newest
    first, from the status index (counted first, as the dashboard does). On SQLite it
    read the primary key backwards, every row down to the oldest dead job; MariaDB's
    optimizer took the range by itself."""
    store: Any = open_store(db_url)
    try:
        ids = store.insert_many([NewJob("t.noop", "{}", queue="s")] * READY)
        for job_id in ids[:3]:  # the oldest jobs die, the rest are done
            store.claim("s", "host:1:a", 1, 60.0)
            assert store.fail("host:1:a", job_id, "boom", dead=True)
        while batch := store.claim("s", "host:1:a", 500, 60.0):
            store.complete("host:1:a", [row.id for row in batch], "keep")
        if backend_of(db_url) == "mysql":
            with store._connection().cursor() as cursor:
                cursor.execute("FLUSH STATUS")
        dead = store.list_jobs(status="dead", limit=50)
        assert [row.id for row in dead] == sorted(ids[:3], reverse=True)
        assert [row.id for row in store.list_jobs(status="dead", queue="s", limit=2)] == [
            ids[2],
            ids[1],
        ]
        if backend_of(db_url) == "mysql":
            with store._connection().cursor() as cursor:
                cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
                reads = {name: int(value) for name, value in cursor.fetchall()}
            entries = reads["Handler_read_next"] + reads["Handler_read_prev"]
            assert entries <= 20, reads  # not the thousands of done jobs behind the dead
        newest = store.list_jobs(status="done", limit=50)  # many: the primary key, or sorted
        assert [row.id for row in newest] == ids[:-51:-1]
        if backend_of(db_url) == "sqlite":
            plan = sqlite_plan(db_url, store.queries["list_jobs_status"], {
                "status": "dead", "queue": None, "limit": 50, "highest": 2**63 - 1})  # fmt: skip
            assert plan[0].startswith("SEARCH forkq_jobs USING INDEX forkq_jobs_status"), plan
    finally:
        store.close()
