"""Snooze, `forkq status` of limits, `forkq enqueue --limit-key` and the chores' look at
parked jobs, on both backends, in-process (a Worker's work_once, the CLI's main)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from util import count_rows, sql

from supervisor import Queue, Snooze, registry
from supervisor.cli import parser as cli
from supervisor.config import Config, LimitConfig, PoolConfig, load_config
from supervisor.dburl import parse_database_url
from supervisor.errors import UsageError
from supervisor.models import JobState, NewJob
from supervisor.store import Store, open_store
from supervisor.store.limits import claims as flow
from supervisor.store.limits import upkeep
from supervisor.store.limits.buckets import LimitPlan
from supervisor.store.limits.upkeep import look_after_parked
from supervisor.work.worker import Worker

OWNER = "test:1:limits"
QUEUE = "snoozy"
calls: list[int] = []


@pytest.fixture
def snoozer() -> Iterator[str]:
    """t.snooze_twice snoozes its first two runs, then is done; t.snooze_always never is."""
    calls.clear()

    def twice(payload: object, job: object) -> None:
        calls.append(job.attempts)
        if len(calls) <= 2:
            raise Snooze(0, "the report is not ready yet")

    def always(payload: object, job: object) -> None:
        calls.append(job.attempts)
        raise Snooze(0)

    registry.handler("t.snooze_twice", queue=QUEUE)(twice)
    registry.handler("t.snooze_always", queue=QUEUE, max_snoozes=3)(always)
    yield QUEUE
    for name in ("t.snooze_twice", "t.snooze_always"):
        registry._HANDLERS.pop(name, None)  # the registry is process-wide


def work(store: Store, db_url: str, *limits: LimitConfig) -> int:
    """Run a worker until nothing is due; how many attempts it ran."""
    config = Config(
        database=parse_database_url(db_url),
        pools=(PoolConfig(name=QUEUE, timeout=30, on_success="keep"),),
        limits=limits,
    )
    worker = Worker(store, config, [QUEUE], OWNER)
    ran = 0
    for _ in range(50):
        done = worker.work_once()
        if not done:
            return ran
        ran += done
    raise AssertionError("the worker never ran out of due jobs")


def test_a_snooze_uses_no_attempt_and_is_counted_on_the_job(
    store: Store, db_url: str, snoozer: str
) -> None:
    job_id = store.enqueue(NewJob("t.snooze_twice", "{}", queue=snoozer, max_attempts=1))
    assert work(store, db_url) == 3  # snoozed, snoozed, done: max_attempts 1 was enough
    job = store.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.snoozes) == (JobState.DONE, 1, 2)
    assert calls == [1, 1, 1]  # each run was attempt 1: no snooze used one up


def test_a_job_that_snoozes_past_max_snoozes_ends_dead_saying_so(
    store: Store, db_url: str, snoozer: str
) -> None:
    job_id = store.enqueue(NewJob("t.snooze_always", "{}", queue=snoozer))
    assert work(store, db_url) == 4  # three snoozes allowed, the fourth ends it
    job = store.get_job(job_id)
    assert job is not None and job.status == JobState.DEAD
    assert (job.attempts, job.snoozes) == (1, 3)
    assert job.last_error is not None and "snoozed 3 times" in job.last_error
    assert "max_snoozes" in job.last_error


def test_a_long_snooze_waits_as_scheduled_and_a_lost_lease_changes_nothing(store: Store) -> None:
    job_id = store.enqueue(NewJob("t.any", "{}", queue="q"))
    [claimed] = store.claim("q", OWNER, 1, lease=60)
    assert store.snooze("someone:else", claimed.id, 10, max_snoozes=5) == "lost"
    assert store.snooze(OWNER, claimed.id, 3600, max_snoozes=5) == "snoozed"
    job = store.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.snoozes, job.locked_by) == (
        JobState.SCHEDULED,
        0,
        1,
        None,
    )
    assert job.run_at.timestamp() - store.db_now() > 3500


def test_a_limited_worker_keeps_the_limit_and_snoozed_jobs_leave_their_slot(
    store: Store, db_url: str, snoozer: str
) -> None:
    """The worker itself claims under [limits]: with concurrency 1 its batch holds one
    covered job at a time, and every job still ends (the slot is handed on)."""
    ids = store.insert_many([NewJob("t.snooze_twice", "{}", queue=snoozer)] * 3)
    limit = LimitConfig("one", handlers=("t.snooze_twice",), concurrency=1)
    assert work(store, db_url, limit) >= 5
    assert {j.status for j in (store.get_job(i) for i in ids) if j} == {JobState.DONE}


# --- forkq status and forkq enqueue ---------------------------------------------------------------


@pytest.fixture
def fresh_logging() -> Iterator[None]:
    """An in-process `cli.main` binds structlog to pytest's captured stdout: reset it."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


def config_file(tmp_path: Path, db_url: str) -> Path:
    path = tmp_path / "forkq.toml"
    path.write_text(
        f"[database]\nurl = {json.dumps(db_url)}\n"
        "[pools.email]\nworkers = 1\n"
        '[limits.mailgun]\nhandlers = ["m.send"]\nconcurrency = 2\nrate = "100/1m"\nper_key = true\n'
        '[limits.reports]\nqueues = ["reports"]\nconcurrency = 1\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.usefixtures("fresh_logging")
def test_status_shows_what_waits_on_which_limit(
    store: Store, db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, db_url)
    for key in ("acme", "acme", "acme", "globex"):
        assert (
            cli.main(
                ["enqueue", "-c", str(path), "m.send", "{}", "--queue", "email", "--limit-key", key]
            )
            == 0
        )
    capsys.readouterr()
    config = load_config(path)
    plan = LimitPlan(config.limits, {})
    taken = 0  # claims one after the other (a limit with a rate holds no job behind another)
    while got := flow.complete_and_claim(store, plan, {}, "email", OWNER, 20, 60)[0]:
        taken += len(got)
    assert taken == 3

    assert cli.main(["status", "--json", "-c", str(path)]) == 0
    limits = json.loads(capsys.readouterr().out)["limits"]
    acme = next(b for b in limits if b["key"] == "acme")
    assert (
        acme["running"],
        acme["concurrency"],
        acme["started"],
        acme["rate"],
        acme["waiting"],
    ) == (
        2,
        2,
        2,
        "100/1m",
        1,
    )
    assert {(b["limit"], b["key"], b["running"]) for b in limits} >= {
        ("mailgun", "globex", 1),
        ("reports", "", 0),  # a limit without per_key is always shown
    }

    assert cli.main(["status", "-c", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("LIMIT"))
    assert [line.split() for line in lines[start : start + 4]] == [
        ["LIMIT", "KEY", "RUNNING", "STARTED", "WAITING"],
        ["mailgun", "acme", "2/2", "2/100/1m", "1"],
        ["mailgun", "globex", "1/2", "1/100/1m", "0"],
        ["reports", "-", "0/1", "-", "0"],
    ]


@pytest.mark.usefixtures("fresh_logging")
def test_enqueue_takes_a_limit_key(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config_file(tmp_path, db_url)
    assert cli.main(["enqueue", "-c", str(path), "m.send", "--limit-key", "tenant-7"]) == 0
    job_id = int(capsys.readouterr().out)
    assert sql(db_url, "SELECT limit_key, limit_wait FROM forkq_jobs WHERE id = ?", [job_id]) == [
        ("tenant-7", "")
    ]
    assert cli.main(["enqueue", "-c", str(path), "m.send", "--limit-key", "x" * 192]) == 2
    assert "limit_key must be a string of 1 to 191 characters" in capsys.readouterr().err


@pytest.mark.usefixtures("fresh_logging")
def test_a_limit_key_with_a_nul_is_refused_on_every_path(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No bucket can hold it (SQLite's JSON ends a string at a NUL): refused before anything
    is written, by enqueue, enqueue_many and `forkq enqueue` (issue 22.3)."""
    queue = Queue(db_url)
    try:
        with pytest.raises(UsageError, match="limit_key must not hold a NUL character"):
            queue.enqueue("m.send", {}, limit_key="tenant\x007")
        with pytest.raises(UsageError, match="limit_key must not hold a NUL character"):
            queue.enqueue_many(
                [
                    {"handler": "m.send", "limit_key": "a"},
                    {"handler": "m.send", "limit_key": "\x00"},
                ]
            )
    finally:
        queue.close()
    path = config_file(tmp_path, db_url)
    assert cli.main(["enqueue", "-c", str(path), "m.send", "--limit-key", "k\x00x"]) == 2
    assert "limit_key must not hold a NUL character" in capsys.readouterr().err
    assert count_rows(db_url, "forkq_jobs") == 0


# --- the chores ----------------------------------------------------------------------------------


def park(store: Store, limit: LimitConfig, jobs: int) -> list[int]:
    """`jobs` jobs of m.send in `email`; a claim under `limit` (one slot) runs the first
    and parks the rest on its bucket. Their ids, the claimed one first."""
    ids = store.insert_many([NewJob("m.send", "{}", queue="email")] * jobs)
    plan = LimitPlan([limit], {"m.send": "email"})
    assert len(flow.complete_and_claim(store, plan, {}, "email", OWNER, 10, 60)[0]) == 1
    return ids


def parked_count(db_url: str) -> int:
    return int(sql(db_url, "SELECT COUNT(*) FROM forkq_jobs WHERE limit_wait <> ''")[0][0])


@pytest.mark.parametrize("others", [(), (LimitConfig("other", queues=("x",), concurrency=9),)])
def test_jobs_parked_on_a_limit_gone_from_the_config_are_let_go(
    store: Store, db_url: str, others: tuple[LimitConfig, ...]
) -> None:
    """A parked job is never forgotten: once its limit is gone from the config, with
    another limit left or none, the chores let it go (a plain claim reads only the ready
    jobs no limit holds back), and the next claim takes it."""
    ids = park(store, LimitConfig("gone", handlers=("m.send",), concurrency=1), 4)
    assert parked_count(db_url) == 3
    config = Config(database=parse_database_url(db_url), limits=others)
    if store.backend == "mysql":  # SQLite's plain claim reads every ready job of its queue
        assert store.claim("email", OWNER, 10, lease=60) == []  # parked: left alone
    assert look_after_parked(store, config) >= 3
    assert parked_count(db_url) == 0
    claimed = store.claim("email", OWNER, 10, lease=60)
    assert [job.id for job in claimed] == ids[1:]  # in claim order


def test_the_chores_let_go_of_a_bounded_number_a_tick(
    store: Store, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """However many keys a removed per-key limit had, one tick lets go of at most
    LET_GO_MOST jobs (a page a transaction): the tick stays short; the next ones go on."""
    monkeypatch.setattr(upkeep, "LET_GO_PAGE", 2)
    monkeypatch.setattr(upkeep, "LET_GO_MOST", 3)
    jobs = [NewJob("m.send", "{}", queue="email", limit_key=k) for k in "aaaabbbb"]
    store.insert_many(jobs)
    gone = LimitConfig("gone", handlers=("m.send",), concurrency=1, per_key=True)
    plan = LimitPlan([gone], {"m.send": "email"})
    claimed = 0
    while batch := flow.complete_and_claim(store, plan, {}, "email", OWNER, 10, 60)[0]:
        claimed += len(batch)  # one slot a key: the first of each runs, the rest park
    assert (claimed, parked_count(db_url)) == (2, 6)  # three on each key's bucket
    config = Config(database=parse_database_url(db_url))  # the limit is gone
    look_after_parked(store, config)
    assert parked_count(db_url) == 3  # two of one bucket, one of the other
    look_after_parked(store, config)
    assert parked_count(db_url) == 0


def test_a_bucket_with_parked_jobs_and_no_row_gets_a_wake_at(store: Store, db_url: str) -> None:
    """The chores give a bucket with parked jobs a wake_at (here an operator's retry, or a
    prune, left it without), so a claim under its limit looks at it again; a limit still
    in the config keeps its jobs parked."""
    limit = LimitConfig("mail", handlers=("m.send",), concurrency=1)
    park(store, limit, 3)
    sql(db_url, "DELETE FROM forkq_limits")  # as if pruned, or never written
    config = Config(database=parse_database_url(db_url), limits=(limit,))
    assert look_after_parked(store, config) >= 1
    assert sql(db_url, "SELECT name FROM forkq_limits WHERE wake_at IS NOT NULL") == [("mail",)]
    assert parked_count(db_url) == 2


def test_the_chores_look_at_parked_buckets_without_reading_the_jobs(mysql_db_url: str) -> None:
    """MariaDB: the chores find the buckets with parked jobs one index dive a bucket
    (parked_bucket_after, on forkq_jobs_limit), whatever the jobs. (On schema 18 that index
    holds ready_wait, not status and limit_wait: the statement read every row of the table,
    for each bucket, every check tick.)"""
    store: Any = open_store(mysql_db_url)
    store.insert_many([NewJob("t.noop", "{}", queue="other")] * 2_000)
    parked = store.insert_many([NewJob("m.send", "{}", queue="email", limit_key="k")] * 4)
    for job_id, bucket in zip(parked, ["m/a", "m/a", "m/b", "m/b"], strict=True):
        sql(mysql_db_url, "UPDATE forkq_jobs SET limit_wait = ? WHERE id = ?", [bucket, job_id])
    limit = LimitConfig("m", queues=("email",), concurrency=1)
    config = Config(database=parse_database_url(mysql_db_url), limits=(limit,))
    try:
        conn = store._connection()  # the store's own session: its counters are the chores'
        with conn.cursor() as cursor:
            before = rows_read(cursor)
            assert look_after_parked(store, config) == 2  # a wake_at for each bucket
            read = rows_read(cursor) - before
    finally:
        store.close()
    assert read < 50, f"{read} rows read to find 2 buckets beside 2,004 jobs"


def rows_read(cursor: Any) -> int:
    """The session's rows read, whatever the access: index dives, ranges and full scans."""
    cursor.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
    return sum(int(value) for _, value in cursor.fetchall())
