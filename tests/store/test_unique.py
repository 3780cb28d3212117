"""Uniqueness windows and scopes (README "Unique jobs"): `unique_for`, `unique_while`,
`on_conflict` through `Queue.enqueue`, `enqueue_many`, the CLI, PHP and a raw INSERT,
on both backends. The database enforces them (forkq_jobs.unique_live under the UNIQUE
index forkq_jobs_unique): a raw INSERT inside a window is refused by the server itself.
Scopes against a real daemon's state changes and the debounce storm:
tests/daemon/test_unique_daemon.py.
"""

from __future__ import annotations

import json
import math
import sqlite3
import subprocess
import sys
import time

import pymysql
import pytest
from php_util import (
    Php,
    php_fixture,  # noqa: F401  (the `php` fixture)
    run_php_fixture,  # noqa: F401  (the `run_php` fixture)
)
from util import sql, subprocess_env

from supervisor import Queue
from supervisor.cluster.chores import reap_expired_leases
from supervisor.errors import UsageError
from supervisor.models import HandBack
from supervisor.store import Store

RAW_INSERT = (
    "INSERT INTO forkq_jobs (queue, handler, payload, unique_key, unique_for, unique_while)"
    " VALUES ('raw', 'raw.job', '{}', ?, ?, ?)"
)
REFUSED = (pymysql.err.IntegrityError, sqlite3.IntegrityError)  # 1062, UNIQUE constraint
CHECKED = (*REFUSED, pymysql.err.OperationalError)  # MariaDB's CHECK: 4025


def away_from_a_window_edge(store: Store, window: int, margin: float = 5.0) -> None:
    """Wait (at most `margin` s) until the database clock is `margin` s or more from the
    end of its current `window`, so two enqueues made now fall in the same window."""
    now = store.db_now()
    left = window - now % window
    if left < margin:
        time.sleep(left + 0.01)


def test_plain_unique_key_keeps_its_meaning_in_any_state(
    db_url: str, queue: Queue, store: Store
) -> None:
    """No window, no scope: a key is held by its job as long as the row exists (kept)."""
    first = queue.enqueue("u.plain", {"n": 1}, unique_key="plain")
    assert (first.conflicted, first.existing, first.id) == (False, None, int(first))
    again = queue.enqueue("u.plain", {"n": 2}, unique_key="plain")
    assert again == first and again.conflicted and again.existing == first
    [claimed] = store.claim("default", "h:1:t", 1, lease=30)
    assert claimed.id == first
    assert store.complete("h:1:t", [first], "keep") == 1
    done = queue.enqueue("u.plain", {"n": 3}, unique_key="plain")
    assert done == first and done.conflicted
    row = queue.get(first)
    assert row is not None and json.loads(row.payload) == {"n": 1}  # skip: unchanged
    assert sql(db_url, "SELECT duplicates FROM forkq_jobs WHERE id = ?", [first]) == [(2,)]


def test_a_second_enqueue_in_the_window_conflicts_and_after_it_does_not(
    db_url: str, queue: Queue, store: Store
) -> None:
    away_from_a_window_edge(store, 3600)
    first = queue.enqueue("u.win", unique_key="hourly", unique_for=3600)
    second = queue.enqueue("u.win", unique_key="hourly", unique_for=3600)
    assert second == first and second.conflicted
    # A window of 1 s: wait until the database clock is in the next one.
    short = queue.enqueue("u.win", unique_key="short", unique_for=1)
    row = queue.get(short)
    assert row is not None
    window_end = math.floor(row.enqueued_at.timestamp()) + 1
    while store.db_now() < window_end + 0.01:
        time.sleep(0.05)
    later = queue.enqueue("u.win", unique_key="short", unique_for=1)
    assert not later.conflicted and later != short
    keys = sql(db_url, "SELECT id FROM forkq_jobs WHERE unique_key = 'short'")
    assert sorted(i for (i,) in keys) == sorted([short, later])


def test_replace_changes_the_waiting_jobs_payload(queue: Queue) -> None:
    first = queue.enqueue("u.rep", {"v": 1}, unique_key="rep", on_conflict="replace")
    second = queue.enqueue("u.rep", {"v": 2}, unique_key="rep", on_conflict="replace")
    skipped = queue.enqueue("u.rep", {"v": 3}, unique_key="rep")  # skip: left as it is
    assert second == first == skipped and second.conflicted and skipped.conflicted
    row = queue.get(first)
    assert row is not None and json.loads(row.payload) == {"v": 2}


def test_replace_leaves_a_running_job_alone(queue: Queue, store: Store) -> None:
    first = queue.enqueue("u.rep", {"v": 1}, unique_key="run", unique_while="active")
    [claimed] = store.claim("default", "h:1:t", 1, lease=30)
    assert claimed.id == first
    again = queue.enqueue(
        "u.rep", {"v": 2}, unique_key="run", unique_while="active", on_conflict="replace"
    )
    assert again == first and again.conflicted
    row = queue.get(first)
    assert row is not None and json.loads(row.payload) == {"v": 1}


def test_debounce_pushes_run_at_at_most_debounce_max_past_the_first(
    queue: Queue, store: Store
) -> None:
    first = queue.enqueue("u.deb", {"v": 1}, unique_key="deb", delay=10, on_conflict="debounce",
                          debounce_max=30)  # fmt: skip
    row = queue.get(first)
    assert row is not None and row.status == "scheduled"
    start, enqueued = row.run_at.timestamp(), row.enqueued_at.timestamp()
    pushed = queue.enqueue("u.deb", {"v": 2}, unique_key="deb", delay=20,
                           on_conflict="debounce", debounce_max=30)  # fmt: skip
    assert pushed == first and pushed.conflicted
    row = queue.get(first)
    assert row is not None and json.loads(row.payload) == {"v": 2}
    assert start < row.run_at.timestamp() < enqueued + 30
    capped = queue.enqueue("u.deb", {"v": 3}, unique_key="deb", delay=3600,
                           on_conflict="debounce", debounce_max=30)  # fmt: skip
    assert capped == first
    row = queue.get(first)
    assert row is not None and abs(row.run_at.timestamp() - (enqueued + 30)) < 0.001
    # Never earlier than it was: a debounce due now leaves a later run_at.
    queue.enqueue("u.deb", {"v": 4}, unique_key="deb", on_conflict="debounce", debounce_max=30)
    row = queue.get(first)
    assert row is not None and abs(row.run_at.timestamp() - (enqueued + 30)) < 0.001
    assert (row.status, json.loads(row.payload)) == ("scheduled", {"v": 4})


def test_a_debounced_ready_job_waits_scheduled(queue: Queue) -> None:
    first = queue.enqueue("u.deb", unique_key="soon", on_conflict="debounce")
    row = queue.get(first)
    assert row is not None and row.status == "ready"
    queue.enqueue("u.deb", unique_key="soon", delay=600, on_conflict="debounce")
    row = queue.get(first)
    assert row is not None and row.status == "scheduled"  # out of the claim's range


def test_enqueue_many_tells_each_conflict(queue: Queue) -> None:
    ids = queue.enqueue_many(
        [
            {"handler": "u.many", "unique_key": "m", "unique_for": 3600},
            {"handler": "u.many", "unique_key": "m", "unique_for": 3600},
            {"handler": "u.many", "payload": {"v": 2}, "unique_key": "r", "on_conflict": "replace"},
            {"handler": "u.many", "payload": {"v": 3}, "unique_key": "r", "on_conflict": "replace"},
            {"handler": "u.many"},
        ]
    )
    assert [i.conflicted for i in ids] == [False, True, False, True, False]
    assert ids[0] == ids[1] and ids[2] == ids[3] and len(set(ids)) == 3
    row = queue.get(ids[2])
    assert row is not None and json.loads(row.payload) == {"v": 3}


def test_a_raw_insert_duplicate_is_refused_by_the_database(db_url: str, store: Store) -> None:
    away_from_a_window_edge(store, 3600)
    sql(db_url, RAW_INSERT, ["raw-1", 3600, "queued"])
    with pytest.raises(REFUSED):
        sql(db_url, RAW_INSERT, ["raw-1", 3600, "queued"])
    sql(db_url, RAW_INSERT, ["raw-2", None, None])
    with pytest.raises(REFUSED):
        sql(db_url, RAW_INSERT, ["raw-2", None, None])
    with pytest.raises(CHECKED):  # a scope the database does not know (CHECK)
        sql(db_url, RAW_INSERT, ["raw-3", None, "always"])
    rows = sql(db_url, "SELECT unique_key FROM forkq_jobs WHERE queue = 'raw' ORDER BY id")
    assert rows == [("raw-1",), ("raw-2",)]


def test_bad_uniqueness_options_are_refused_before_anything_is_written(queue: Queue) -> None:
    bad = [
        {"unique_for": 60},  # no unique_key
        {"unique_key": "k", "unique_for": 0},
        {"unique_key": "k", "unique_for": 1.5},
        {"unique_key": "k", "unique_while": "always"},
        {"unique_key": "k", "on_conflict": "merge"},
        {"unique_key": "k", "debounce_max": 5},  # only with debounce
        {"unique_key": "k", "on_conflict": "debounce", "debounce_max": -1},
    ]
    for options in bad:
        with pytest.raises(UsageError):
            queue.enqueue("u.bad", **options)
    assert queue.store.list_jobs(limit=10) == []


def test_the_cli_enqueues_with_a_window_and_says_it_conflicted(db_url: str, store: Store) -> None:
    away_from_a_window_edge(store, 3600)
    args = ["enqueue", "u.cli", '{"v": 1}', "--unique-key", "cli", "--unique-for", "3600",
            "--unique-while", "queued", "--on-conflict", "replace"]  # fmt: skip
    first = forkq(db_url, *args)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    args[2] = '{"v": 2}'
    second = forkq(db_url, *args)
    assert second.returncode == 0 and second.stdout == first.stdout
    assert f"held by job {first.stdout.strip()}" in second.stderr
    [(payload, unique_for, unique_while)] = sql(
        db_url, "SELECT payload, unique_for, unique_while FROM forkq_jobs WHERE unique_key = 'cli'"
    )
    assert (json.loads(payload), unique_for, unique_while) == ({"v": 2}, 3600, "queued")


def forkq(url: str, *args: str) -> subprocess.CompletedProcess[str]:
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


PHP_ENQUEUE = """
$pdo = connect();
$ids = [];
foreach ([1, 2] as $v) {
    $id = Queue::enqueue($pdo, 'u.php', ['v' => $v], [
        'unique_key' => 'php', 'unique_for' => 3600, 'unique_while' => 'active',
        'on_conflict' => 'debounce', 'delay' => 10 * $v, 'debounce_max' => 15,
    ], $conflicted);
    out([$id, $conflicted]);
}
try {
    Queue::enqueue($pdo, 'u.php', [], ['unique_for' => 60]);
} catch (InvalidArgumentException $e) {
    out($e->getMessage());
}
"""


def test_php_enqueues_with_a_window_and_debounces(run_php: Php, store: Store) -> None:
    away_from_a_window_edge(store, 3600)
    first, second, refused = run_php(PHP_ENQUEUE)
    assert first[1] is False and second == [first[0], True]
    assert "need a unique_key" in refused
    row = store.get_job(first[0])
    assert row is not None and json.loads(row.payload) == {"v": 2}
    assert abs(row.run_at.timestamp() - (row.enqueued_at.timestamp() + 15)) < 0.001


def test_a_job_back_in_scope_never_collides_with_the_new_holder(queue: Queue, store: Store) -> None:
    """A retry of a queued job after it ran, an operator's retry of a dead one and a claimed
    job handed back, while another job holds their key: no error, never two holders."""
    first = queue.enqueue("u.back", unique_key="q", unique_while="queued")
    dead = queue.enqueue("u.back", unique_key="a", unique_while="active")
    assert {job.id for job in store.claim("default", "h:1:t", 2, lease=30)} == {first, dead}
    newer = queue.enqueue("u.back", unique_key="q", unique_while="queued")
    assert not newer.conflicted  # the first runs: the key is free
    assert store.fail("h:1:t", first, "boom", dead=False)  # retried: it ran, so not queued
    assert queue.enqueue("u.back", unique_key="q", unique_while="queued") == newer
    assert store.fail("h:1:t", dead, "boom", dead=True)
    taken = queue.enqueue("u.back", unique_key="a", unique_while="active")
    assert not taken.conflicted
    assert store.retry_jobs([dead]) == 0  # its key is taken: it stays dead, and says why
    assert store.not_retried(dead) == f"its unique key is held by job {taken}"
    row = queue.get(dead)
    assert row is not None and row.status == "dead"
    # Two claimed at once: the second is claimed behind the first, never started. Handed
    # back while a new job took its key, it is left to its lease's end.
    x = queue.enqueue("u.back", queue="hb", unique_key="x", unique_while="queued")
    y = queue.enqueue("u.back", queue="hb", unique_key="y", unique_while="queued")
    assert [job.id for job in store.claim("hb", "h:2:t", 2, lease=30)] == [x, y]
    assert not queue.enqueue("u.back", queue="hb", unique_key="y", unique_while="queued").conflicted
    store.release("h:2:t", [x, y])
    statuses = {i: getattr(queue.get(i), "status", None) for i in (x, y)}
    assert statuses == {x: "ready", y: "running"}


def test_a_hand_back_whose_release_is_ignored_returns_the_job_with_its_attempt_kept(
    queue: Queue, store: Store
) -> None:
    """The master hands back a claimed, unstarted job whose queued key a new job took
    meanwhile: it goes back to ready at once with the claim's attempt kept (out of the key's
    queued scope), never left held until its lease ends."""
    x = queue.enqueue("u.back", queue="hb", unique_key="x2", unique_while="queued")
    y = queue.enqueue("u.back", queue="hb", unique_key="y2", unique_while="queued")
    assert [job.id for job in store.claim("hb", "h:3:t", 2, lease=30)] == [x, y]
    newer = queue.enqueue("u.back", queue="hb", unique_key="y2", unique_while="queued")
    assert not newer.conflicted
    store.hand_back("h:3:t", HandBack([], "keep", [y], None, 0.0))
    row = queue.get(y)
    assert row is not None and (row.status, row.attempts, row.locked_by) == ("ready", 1, None)


def test_an_expired_lease_whose_release_is_ignored_returns_the_job_with_its_attempt_kept(
    queue: Queue, store: Store
) -> None:
    """The reaper settles a gone holder's claimed, unstarted job whose queued key a new job
    took meanwhile: back to ready with the claim's attempt kept, not left running (MySQL
    counts the ignored row as released) nor charged a failure."""
    x = queue.enqueue("u.back", queue="rp", unique_key="x3", unique_while="queued")
    y = queue.enqueue("u.back", queue="rp", unique_key="y3", unique_while="queued")
    assert [job.id for job in store.claim("rp", "h:4:t", 2, lease=0.2)] == [x, y]
    assert not queue.enqueue(
        "u.back", queue="rp", unique_key="y3", unique_while="queued"
    ).conflicted
    time.sleep(0.5)  # the lease runs out: the holder is gone
    reap_expired_leases(store)
    row = queue.get(y)
    assert row is not None and (row.status, row.attempts, row.last_error) == ("ready", 1, None)
