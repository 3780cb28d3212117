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
import time
from datetime import UTC, datetime, timedelta

import pymysql
import pytest
from php_util import (
    Php,
    php_fixture,  # noqa: F401  (the `php` fixture)
    run_php_fixture,  # noqa: F401  (the `run_php` fixture)
)
from util import forkq_cli, sql

from supervisor import Queue
from supervisor.cluster.chores import reap_expired_leases
from supervisor.errors import UsageError
from supervisor.models import HandBack
from supervisor.outcomes import SnoozeWritten
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


def test_a_first_debounced_enqueue_waits_at_most_debounce_max(queue: Queue) -> None:
    """ "At the latest debounce_max after the first": its own delay or run_at too."""
    later = datetime.now(UTC) + timedelta(hours=1)
    for key, options in (("d", {"delay": 60}), ("r", {"run_at": later})):
        job = queue.enqueue("u.deb", unique_key=key, on_conflict="debounce", debounce_max=3,
                            **options)  # type: ignore[arg-type]  # fmt: skip
        row = queue.get(job)
        assert row is not None, key
        assert abs(row.run_at.timestamp() - (row.enqueued_at.timestamp() + 3)) < 0.5, key
    with pytest.raises(UsageError, match="debounce_max must be"):  # (no overflow later)
        queue.enqueue("u.deb", unique_key="big", on_conflict="debounce", debounce_max=1e300)
    # A debounce_max past every run_at a backend holds caps nothing and breaks nothing
    job = queue.enqueue("u.deb", unique_key="huge", on_conflict="debounce", debounce_max=2**31 - 1,
                        run_at=later)  # fmt: skip
    row = queue.get(job)
    assert row is not None and row.run_at == later


def test_a_debounced_ready_job_waits_scheduled(queue: Queue) -> None:
    first = queue.enqueue("u.deb", unique_key="soon", on_conflict="debounce")
    row = queue.get(first)
    assert row is not None and row.status == "ready"
    queue.enqueue("u.deb", unique_key="soon", delay=600, on_conflict="debounce")
    row = queue.get(first)
    assert row is not None and row.status == "scheduled"  # out of the claim's range


def test_enqueue_many_tells_each_conflict(queue: Queue, store: Store) -> None:
    away_from_a_window_edge(store, 3600)  # MariaDB stamps each row of the batch on its own
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
    first = forkq_cli(db_url, *args)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    args[2] = '{"v": 2}'
    second = forkq_cli(db_url, *args)
    assert second.returncode == 0 and second.stdout == first.stdout
    assert f"held by job {first.stdout.strip()}" in second.stderr
    [(payload, unique_for, unique_while)] = sql(
        db_url, "SELECT payload, unique_for, unique_while FROM forkq_jobs WHERE unique_key = 'cli'"
    )
    assert (json.loads(payload), unique_for, unique_while) == ({"v": 2}, 3600, "queued")


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


def superseded_by(queue: Queue, job_id: int) -> tuple[str, str | None]:
    row = queue.get(job_id)
    assert row is not None and row.locked_by is None and row.finished_at is not None
    return str(row.status), row.last_error


def test_a_queued_job_waiting_for_its_retry_or_after_a_snooze_holds_its_key(
    queue: Queue, store: Store
) -> None:
    """unique_while="queued" holds the key in scheduled, ready and waiting, whatever the
    attempts (SPEC "Composing jobs"): a job that failed and waits for its retry, or that
    snoozed, still holds it."""
    later = queue.enqueue("u.back", unique_key="rq", unique_while="queued")
    now = queue.enqueue("u.back", unique_key="rn", unique_while="queued")
    nap = queue.enqueue("u.back", unique_key="rs", unique_while="queued")
    assert {j.id for j in store.claim("default", "h:5:t", 3, lease=30)} == {later, now, nap}
    assert store.fail("h:5:t", later, "boom", dead=False, delay=600, unique=True)
    assert store.fail("h:5:t", now, "boom", dead=False, unique=True)
    assert store.snooze("h:5:t", nap, 600, 5, unique=True) is SnoozeWritten.SNOOZED
    assert [getattr(queue.get(i), "status", None) for i in (later, now, nap)] == [
        "scheduled", "ready", "scheduled"
    ]  # fmt: skip
    for key, holder in (("rq", later), ("rn", now), ("rs", nap)):
        again = queue.enqueue("u.back", unique_key=key, unique_while="queued")
        assert again == holder and again.conflicted


def test_a_job_back_in_scope_never_collides_with_the_new_holder(queue: Queue, store: Store) -> None:
    """A retry of a queued job that ran while a newer job took its key yields: it ends
    cancelled, superseded, and the newer one keeps the key. An operator's retry of a dead
    job whose key is taken leaves it dead and says why. Never an error, never two holders."""
    first = queue.enqueue("u.back", unique_key="q", unique_while="queued")
    dead = queue.enqueue("u.back", unique_key="a", unique_while="active")
    assert {job.id for job in store.claim("default", "h:1:t", 2, lease=30)} == {first, dead}
    newer = queue.enqueue("u.back", unique_key="q", unique_while="queued")
    assert not newer.conflicted  # the first runs: the key is free
    assert store.fail("h:1:t", first, "boom", dead=False, unique=True)  # settled: it yielded
    assert superseded_by(queue, first) == (
        "cancelled", f"superseded: its unique key is held by job {newer}"
    )  # fmt: skip
    assert queue.enqueue("u.back", unique_key="q", unique_while="queued") == newer
    assert store.fail("h:1:t", dead, "boom", dead=True)
    taken = queue.enqueue("u.back", unique_key="a", unique_while="active")
    assert not taken.conflicted
    assert store.retry_jobs([dead]) == 0  # its key is taken: it stays dead, and says why
    assert store.not_retried(dead) == f"its unique key is held by job {taken}"
    row = queue.get(dead)
    assert row is not None and row.status == "dead"
    # Two claimed at once, the second never started; released while a new job took the
    # second's key: the first goes back to ready, the second yields.
    x = queue.enqueue("u.back", queue="hb", unique_key="x", unique_while="queued")
    y = queue.enqueue("u.back", queue="hb", unique_key="y", unique_while="queued")
    assert [job.id for job in store.claim("hb", "h:2:t", 2, lease=30)] == [x, y]
    y2 = queue.enqueue("u.back", queue="hb", unique_key="y", unique_while="queued")
    assert not y2.conflicted
    assert store.release("h:2:t", [x, y], unique=True) == 2
    assert getattr(queue.get(x), "status", None) == "ready"
    assert superseded_by(queue, y) == (
        "cancelled",
        f"superseded: its unique key is held by job {y2}",
    )


def test_a_snooze_or_a_retry_meeting_its_key_taken_ends_superseded_with_its_children(
    queue: Queue, store: Store
) -> None:
    """A snooze yields as a retry does; a parent that yields settles its waiting children as
    any cancel does (on_parent_failure="cancel"). A snooze past max_snoozes still ends dead."""
    nap = queue.enqueue("u.back", queue="sz", unique_key="s", unique_while="queued")
    parent = queue.enqueue("u.back", queue="sz", unique_key="p", unique_while="queued")
    child = queue.enqueue("u.back", queue="sz", depends_on=[parent])
    tired = queue.enqueue("u.back", queue="sz", unique_key="t", unique_while="queued")
    assert {j.id for j in store.claim("sz", "h:6:t", 3, lease=30)} == {nap, parent, tired}
    holders = {k: queue.enqueue("u.back", queue="sz", unique_key=k, unique_while="queued")
               for k in ("s", "p", "t")}  # fmt: skip
    assert not any(h.conflicted for h in holders.values())
    assert store.snooze("h:6:t", nap, 0, 5, unique=True) is SnoozeWritten.SUPERSEDED
    assert superseded_by(queue, nap) == (
        "cancelled", f"superseded: its unique key is held by job {holders['s']}"
    )  # fmt: skip
    assert store.fail("h:6:t", parent, "boom", dead=False, unique=True)
    assert superseded_by(queue, parent)[0] == "cancelled"
    assert getattr(queue.get(child), "status", None) == "cancelled"
    assert store.snooze("h:6:t", tired, 0, 0, unique=True) is SnoozeWritten.DEAD
    assert [getattr(queue.get(h), "status", None) for h in holders.values()] == ["ready"] * 3


def test_a_hand_back_whose_release_is_ignored_ends_the_job_superseded(
    queue: Queue, store: Store
) -> None:
    """The master hands back a claimed, unstarted job whose queued key a new job took
    meanwhile: it yields at once (cancelled, superseded), never left held until its lease
    ends; the new job keeps the key."""
    x = queue.enqueue("u.back", queue="hb", unique_key="x2", unique_while="queued")
    y = queue.enqueue("u.back", queue="hb", unique_key="y2", unique_while="queued")
    assert [job.id for job in store.claim("hb", "h:3:t", 2, lease=30)] == [x, y]
    newer = queue.enqueue("u.back", queue="hb", unique_key="y2", unique_while="queued")
    assert not newer.conflicted
    assert store.hand_back("h:3:t", HandBack([], "keep", [y], None, 0.0)) == 0  # none returned
    assert superseded_by(queue, y) == (
        "cancelled", f"superseded: its unique key is held by job {newer}"
    )  # fmt: skip
    assert getattr(queue.get(newer), "status", None) == "ready"


def test_an_expired_lease_whose_release_or_retry_is_ignored_ends_the_job_superseded(
    queue: Queue, store: Store
) -> None:
    """The reaper settles a gone holder's jobs whose queued keys new jobs took meanwhile:
    the claimed, unstarted one (released) and the one the claim started (retried, its
    attempt counted) both yield (cancelled, superseded), not left running (MySQL counts
    the ignored rows as changed); the new jobs keep their keys."""
    x = queue.enqueue("u.back", queue="rp", unique_key="x3", unique_while="queued")
    y = queue.enqueue("u.back", queue="rp", unique_key="y3", unique_while="queued")
    assert [job.id for job in store.claim("rp", "h:4:t", 2, lease=0.2)] == [x, y]
    newer = {k: queue.enqueue("u.back", queue="rp", unique_key=k, unique_while="queued")
             for k in ("x3", "y3")}  # fmt: skip
    assert not any(job.conflicted for job in newer.values())
    time.sleep(0.5)  # the lease runs out: the holder is gone
    assert reap_expired_leases(store) == 2
    for job_id, key in ((x, "x3"), (y, "y3")):
        assert superseded_by(queue, job_id) == (
            "cancelled", f"superseded: its unique key is held by job {newer[key]}"
        )  # fmt: skip
    assert [getattr(queue.get(j), "status", None) for j in newer.values()] == ["ready"] * 2


def test_retrying_every_dead_job_leaves_and_names_those_whose_key_is_held(
    queue: Queue, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`retry --dead` and the dashboard's "retry all" go through the dead jobs a chunk at
    a time: a job whose unique key another job holds stays dead, is returned to be named,
    and neither stops the walk early nor is counted as retried (chunks of 2 here, so the
    held ones share chunks with others and come back in none)."""
    import supervisor.store.operators as operators

    monkeypatch.setattr(operators, "PURGE_CHUNK", 2)
    keys = [None, "k1", None, "k2", None, None, "k3"]
    dead = [
        queue.enqueue("u.dead", queue="dq", unique_key=key, unique_while=key and "queued")
        for key in keys
    ]
    assert [job.id for job in store.claim("dq", "h:1:t", len(dead), lease=30)] == dead
    for job_id in dead:
        assert store.fail("h:1:t", job_id, "boom", dead=True)
    # While they are dead their keys are free (unique_while="queued"): new jobs take two.
    holders = {
        key: queue.enqueue("u.dead", queue="elsewhere", unique_key=key, unique_while="queued")
        for key in ("k1", "k3")
    }
    held = [dead[1], dead[6]]
    assert store.retry_dead("dq") == (5, held)
    assert [queue.get(i).status for i in dead] == [  # type: ignore[union-attr]
        "dead" if i in held else "ready" for i in dead
    ]
    assert store.not_retried(held[0]) == f"its unique key is held by job {holders['k1']}"
    assert store.retry_dead("dq") == (0, held)  # again: nothing more to do, same two named
    assert store.still_dead([*dead, holders["k1"]]) == held
