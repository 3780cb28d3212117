"""`Store.stats`: per-queue figures from index dives and capped index ranges, never a scan.

Run against a real SQLite file and a real MariaDB (`db_url`). Rows are written with raw
INSERTs in the states the daemon leaves them in (ready and due, ready but not yet due as
a raw INSERT leaves it, scheduled, running, dead, done), so these tests do not depend on
how a job gets there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from util import backend_of, connected, mysql_connect

from supervisor import Queue
from supervisor.cli import common
from supervisor.cli import parser as cli
from supervisor.models import CancelResult, NewJob, QueueStats
from supervisor.store import Store
from supervisor.store.mysql import QUERIES as MYSQL_QUERIES

HOUR = 3600.0


def add(db_url: str, queue: str, status: str, count: int = 1, *, at: float = 0.0) -> None:
    """`count` rows of `queue` in `status`, with run_at `at` seconds from now (database clock);
    a running row has started (started_at: a claimed row not yet started is not running)."""
    rows = [(queue, status, at)] * count
    with connected(db_url) as conn:
        if backend_of(db_url) == "mysql":
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO forkq_jobs (queue, handler, payload, status, run_at, started_at)"
                    " VALUES (%s, 't.noop', '{}', %s,"
                    " NOW(6) + INTERVAL ROUND(%s * 1000000) MICROSECOND,"
                    " IF(%s = 'running', NOW(6), NULL))",
                    [(q, st, at, st) for q, st, at in rows],
                )
        else:
            conn.executemany(
                "INSERT INTO forkq_jobs (queue, handler, payload, status, run_at, started_at)"
                " VALUES (?, 't.noop', '{}', ?, (julianday('now') - 2440587.5) * 86400.0 + ?,"
                " CASE WHEN ? = 'running' THEN (julianday('now') - 2440587.5) * 86400.0 END)",
                [(q, st, at, st) for q, st, at in rows],
            )
        conn.commit()


def add_queue_of_every_kind(db_url: str, queue: str = "s", n: int = 1) -> None:
    """n x (3 ready and due, 2 ready for later, 4 scheduled, 1 running, 2 dead, 5 done)."""
    add(db_url, queue, "ready", n, at=-90)
    add(db_url, queue, "ready", 2 * n)
    add(db_url, queue, "ready", 2 * n, at=HOUR)  # a raw INSERT with a later run_at
    add(db_url, queue, "scheduled", 4 * n, at=24 * HOUR)
    add(db_url, queue, "running", n, at=-10)
    add(db_url, queue, "dead", 2 * n, at=-2 * HOUR)
    add(db_url, queue, "done", 5 * n, at=-3 * HOUR)


def by_queue(stats: list[QueueStats]) -> dict[str, QueueStats]:
    return {s.queue: s for s in stats}


def figures(s: QueueStats) -> tuple[int, int, int, int, int]:
    return (s.ready, s.delayed, s.running, s.dead, s.done)


# --- counts ------------------------------------------------------------------------------------


def test_stats_count_each_status_and_split_ready_by_run_at(db_url: str, store: Store) -> None:
    add_queue_of_every_kind(db_url)
    add(db_url, "other", "ready")

    stats = by_queue(store.stats(cap=1000))

    assert set(stats) == {"s", "other"}
    s = stats["s"]
    # delayed: 2 ready with a later run_at + 4 scheduled; the ready ones due now are 3
    assert figures(s) == (3, 6, 1, 2, 5)
    assert s.capped == frozenset() and s.paused is False
    assert figures(stats["other"]) == (1, 0, 0, 0, 0)


def test_a_job_cancelled_while_it_runs_counts_as_running_until_it_stops(
    queue: Queue, store: Store
) -> None:
    """`forkq status` and the dashboard read it as running (its handler runs until its
    host stops it); it was in no column at all."""
    job_id = queue.enqueue("t.job", {}, queue="c")
    assert [row.id for row in store.claim("c", "host:1:cafe", 1, 60)] == [job_id]
    assert store.cancel_jobs([job_id], "test")[job_id] == CancelResult.CANCELLING
    assert by_queue(store.stats(cap=1000))["c"].running == 1
    assert store.finish_cancel(job_id)
    assert by_queue(store.stats(cap=1000))["c"].running == 0


def test_counts_past_the_cap_stop_at_the_cap_and_are_named(db_url: str, store: Store) -> None:
    add_queue_of_every_kind(db_url)  # ready 3, delayed 2 + 4, running 1, dead 2, done 5

    [s] = store.stats(cap=3)

    # ready holds exactly the cap: counted, not capped; scheduled (4) stops at 3, and
    # delayed adds the 2 ready-for-later rows to it: a lower bound of 5.
    assert figures(s) == (3, 5, 1, 2, 3)
    assert s.capped == frozenset({"delayed", "done"})
    assert (s.shown("done"), s.shown("ready")) == ("3+", "3")
    assert s.as_dict()["capped"] == ["delayed", "done"]

    [exact] = store.stats(cap=None)
    assert figures(exact) == (3, 6, 1, 2, 5) and exact.capped == frozenset()

    [tight] = store.stats(cap=1)
    assert figures(tight) == (1, 2, 1, 1, 1)
    assert tight.capped == frozenset({"ready", "delayed", "dead", "done"})


def test_oldest_age_is_that_of_the_earliest_due_ready_job(db_url: str, store: Store) -> None:
    add(db_url, "s", "ready", at=-600)
    add(db_url, "s", "ready", at=-5)
    add(db_url, "s", "ready", at=HOUR)
    for status in ("running", "dead", "done", "scheduled"):  # older, but not waiting to run
        add(db_url, "s", status, at=-24 * HOUR)
    add(db_url, "later", "ready", at=HOUR)
    add(db_url, "later", "scheduled", at=-HOUR)  # overdue, not yet promoted: still delayed

    stats = by_queue(store.stats(cap=100))

    assert 599 <= stats["s"].oldest_ready_age < 900
    assert (stats["later"].ready, stats["later"].delayed) == (0, 2)
    assert stats["later"].oldest_ready_age == 0.0


def test_queues_are_found_one_index_dive_each(db_url: str, store: Store) -> None:
    names = [f"q{i:03d}" for i in range(120)] + ["", " lead", "ジョブ", "z\x00nul", "x'; --"]
    # ready rows here are not due yet: like scheduled ones they count as delayed
    fields = {"ready": "delayed", "scheduled": "delayed", "running": "running", "dead": "dead"}
    expected = {}
    for i, name in enumerate(names):
        status = ("ready", "scheduled", "running", "dead", "done")[i % 5]
        add(db_url, name, status, 1 + i % 3, at=HOUR)
        expected[name] = (fields.get(status, "done"), 1 + i % 3)
    store.set_paused("paused-empty", True)

    stats = store.stats(cap=10, queues=["configured", "q007"])

    assert [s.queue for s in stats] == sorted([*names, "paused-empty", "configured"])
    found = by_queue(stats)
    for name, (field, count) in expected.items():
        assert getattr(found[name], field) == count, name
        assert sum(figures(found[name])) == count, name
    assert found["paused-empty"].paused and figures(found["paused-empty"]) == (0, 0, 0, 0, 0)
    assert figures(found["configured"]) == (0, 0, 0, 0, 0)


def test_an_empty_table_has_only_the_named_queues(store: Store) -> None:
    assert store.stats(cap=10) == []
    assert store.stats(cap=10, queues=["email"]) == [QueueStats("email")]


# --- the plans: indexes only -----------------------------------------------------------------


def explain(db_url: str, store: Store, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The plan of the named query as the server would run it, rows as dicts."""
    text = store.queries[name]
    if backend_of(db_url) == "mysql":
        conn = mysql_connect(db_url)
        try:
            with conn.cursor() as cursor:
                cursor.execute("ANALYZE TABLE forkq_jobs")
                cursor.fetchall()
                cursor.execute("EXPLAIN " + text, params)
                columns = [d[0].lower() for d in cursor.description]
                return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
        finally:
            conn.close()
    with connected(db_url) as conn:
        rows = conn.execute("EXPLAIN QUERY PLAN " + text, params).fetchall()
        return [{"detail": row[-1]} for row in rows]


@pytest.mark.parametrize("name", ["stats_first_queue", "stats_queue", "stats_queue_exact"])
def test_stats_queries_read_indexes_only(db_url: str, store: Store, name: str) -> None:
    for queue in ("a", "b", "c"):
        add_queue_of_every_kind(db_url, queue, n=40)  # enough rows for a plan to choose
    plan = explain(db_url, store, name, {"queue": "b", "limit": 11, "minor_limit": 11, "now": 0.0})

    assert plan
    if backend_of(db_url) == "mysql":
        for row in plan:
            if row["table"] == "forkq_jobs":  # <derivedN> rows are the capped ranges' results
                assert row["type"] not in ("ALL", "index"), plan  # no table or full index scan
                assert "Using index" in row["extra"], plan  # never a row read
            else:
                assert row["table"] is None or row["table"].startswith("<derived"), plan
    else:
        details = [row["detail"] for row in plan]
        on_jobs = [d for d in details if "forkq_jobs" in d]
        assert on_jobs, details
        # Every count is an index range; only the running count reads its rows (started_at:
        # a claimed job not started yet is not running), and running rows are few.
        rows_read = [
            d for d in on_jobs if not d.startswith("SEARCH forkq_jobs USING COVERING INDEX")
        ]
        # (The status index, or fair share's tenant index, which also starts with status.)
        assert all(d.startswith("SEARCH forkq_jobs USING INDEX forkq_jobs_") for d in rows_read), (
            details
        )
        assert len(rows_read) <= 1, details


def test_a_queue_reads_at_most_the_cap_of_index_entries_per_count(mysql_db_url: str) -> None:
    """MariaDB's own counters: the statement reads up to cap + 1 entries per range and
    one entry per dive, however many rows each state holds (here 40 to 160)."""
    for queue in ("a", "b", "c"):
        add_queue_of_every_kind(mysql_db_url, queue, n=40)
    conn = mysql_connect(mysql_db_url)
    try:
        with conn.cursor() as cursor:
            cursor.execute("FLUSH STATUS")
            cursor.execute(
                MYSQL_QUERIES["stats_queue"], {"queue": "b", "limit": 11, "minor_limit": 11}
            )
            row = cursor.fetchone()
            cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
            reads = {name: int(value) for name, value in cursor.fetchall()}
    finally:
        conn.close()
    assert row[:6] == (11, 11, 11, 11, 11, 11)  # every range holds more than the cap
    assert reads["Handler_read_rnd_next"] <= 6 * 12 + 6, reads  # the capped ranges' results
    entries = reads["Handler_read_next"] + reads["Handler_read_prev"]
    assert entries <= 6 * 11, reads  # not the 120 to 480 entries of each state
    # One dive per range or single read: running and cancelling jobs are two ranges.
    assert reads["Handler_read_key"] + reads["Handler_read_first"] <= 11, reads


# --- what status makes of a capped count -------------------------------------------------------


@pytest.fixture
def fresh_logging() -> Iterator[None]:
    """An in-process `cli.main` binds structlog to pytest's captured stdout: reset it."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.mark.usefixtures("fresh_logging")
def test_status_marks_capped_counts_and_exact_counts_them(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    add_queue_of_every_kind(db_url)
    monkeypatch.setattr(common, "STATUS_CAP", 4)

    assert cli.main(["status", "--database", db_url]) == 0
    row = next(line.split() for line in capsys.readouterr().out.splitlines() if line[:2] == "s ")
    assert row[:6] == ["s", "3", "6", "1", "2", "4+"]  # scheduled: 4, exactly the cap

    assert cli.main(["status", "--json", "--database", db_url]) == 0
    document = json.loads(capsys.readouterr().out)
    s = next(q for q in document["queues"] if q["queue"] == "s")  # beside the default pool
    assert document["cap"] == 4 and s["capped"] == ["done"]
    assert (s["ready"], s["delayed"], s["done"]) == (3, 6, 4)

    assert cli.main(["status", "--json", "--exact", "--database", db_url]) == 0
    document = json.loads(capsys.readouterr().out)
    s = next(q for q in document["queues"] if q["queue"] == "s")
    assert document["cap"] is None and s["capped"] == [] and s["done"] == 5


def test_the_tick_caps_the_counts_no_alert_reads_lower(store: Store) -> None:
    """minor_cap bounds scheduled, running, done and not-yet-due ready rows; ready and
    dead (what the alert rules read) keep the full cap."""
    store.insert_many([NewJob("t.noop", "{}", queue="m", delay=86_400)] * 30)
    store.insert_many([NewJob("t.noop", "{}", queue="m")] * 12)
    [stats] = [s for s in store.stats(cap=20, minor_cap=5) if s.queue == "m"]
    assert (stats.ready, stats.delayed) == (12, 5)
    assert stats.capped == frozenset({"delayed"})
    [full] = [s for s in store.stats(cap=20) if s.queue == "m"]
    assert (full.ready, full.delayed, full.capped) == (12, 20, frozenset({"delayed"}))
