"""A child claims only what it can start: no job waits behind another while a worker of
its pool is free, and `running` means a handler has started (SPEC "Job lifecycle").

A child claims quick jobs in batches; when the job it runs goes on past the hand-back
grace, the master takes back what it holds unstarted and what it has not acknowledged
(daemon/handback.py). Start times come from the handlers' own clocks (t.record).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_util import Daemon, render_config
from util import sql, wait_until

from supervisor import Queue, events
from supervisor.store import open_store

SLOW = 4.0  # seconds a slow job sleeps: far longer than any wake-up or hand-back


@pytest.fixture
def queue(db_url: str) -> Iterator[Queue]:
    made = Queue(db_url)
    yield made
    made.close()


def records(path: Path) -> dict[int, tuple[int, float, float]]:
    """job id -> (pid, start, end) as the handler wrote them."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        job_id, pid, start, end = line.split(",")
        out[int(job_id)] = (int(pid), float(start), float(end))
    return out


def all_ran(path: Path, count: int) -> dict[int, tuple[int, float, float]] | None:
    seen = records(path)
    return seen if len(seen) == count else None


def warm_up(queue: Queue, daemon: Daemon, count: int = 400) -> None:
    """Quick jobs until the children claim in batches (their slow start has grown)."""
    ids = queue.enqueue_many([{"handler": "t.noop", "payload": {}, "queue": "work"}] * count)
    wait_until(
        lambda: (
            not sql(
                daemon.db_url,
                "SELECT 1 FROM forkq_jobs WHERE id = ? AND status <> 'done'",
                (ids[-1],),
            )
        ),
        timeout=60,
        message=f"the warm-up drained ({daemon.describe()})",
    )


def interleaved(path: Path) -> list[dict[str, Any]]:
    """Two slow jobs, each followed by six quick ones: fewer slow jobs than workers."""
    slow = {"handler": "t.record", "payload": {"file": str(path), "seconds": SLOW}, "queue": "work"}
    quick = {"handler": "t.record", "payload": {"file": str(path)}, "queue": "work"}
    return [slow, *[quick] * 6, slow, *[quick] * 6]


# A limit far from its bound: its queue is claimed in batches too, and handed back alike.
FAR_LIMIT = '\n[limits.api]\nqueues = ["work"]\nconcurrency = 1000\n'


@pytest.mark.parametrize("limits", ["", FAR_LIMIT], ids=["plain", "far_limit"])
def test_quick_jobs_never_wait_behind_a_slow_one_while_a_worker_is_free(
    daemons: Callable[..., Daemon], queue: Queue, tmp_path: Path, limits: str
) -> None:
    daemon = daemons(pools={"work": {"workers": 3, "on_success": "delete"}})
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + limits)
    daemon.start().wait_ready()
    warm_up(queue, daemon)
    path = tmp_path / "records.txt"
    enqueued = time.time()
    ids = queue.enqueue_many(interleaved(path))
    slow_ids = {ids[0], ids[7]}
    seen = wait_until(
        lambda: all_ran(path, len(ids)),
        timeout=SLOW * 4,
        message=f"every job ran ({daemon.describe()})",
    )
    waits = {job_id: seen[job_id][1] - enqueued for job_id in ids if job_id not in slow_ids}
    worst = max(waits, key=lambda job_id: waits[job_id])
    # Behind a slow job a quick one would wait SLOW seconds; free workers take it at once.
    assert waits[worst] < SLOW / 4, f"job {worst} started {waits[worst]:.2f}s after enqueue"
    assert daemon.events(events.JOBS_HANDED_BACK), daemon.describe()


def test_running_counts_only_started_jobs_never_more_than_the_pool(
    daemons: Callable[..., Daemon], queue: Queue, tmp_path: Path, db_url: str
) -> None:
    """Claimed-but-unstarted jobs are never shown or counted as running (status, the
    dashboard's running page), and a slow job's start is its handler's."""
    daemon = daemons(pools={"work": {"workers": 2}}).start().wait_ready()
    warm_up(queue, daemon)
    path = tmp_path / "records.txt"
    ids = queue.enqueue_many(interleaved(path))
    store = open_store(db_url)
    most_running = most_listed = 0
    try:
        deadline = time.monotonic() + SLOW * 4
        while len(records(path)) < len(ids) and time.monotonic() < deadline:
            stats = {s.queue: s for s in store.stats(queues=["work"])}
            most_running = max(most_running, stats["work"].running if "work" in stats else 0)
            listed = [j for j in store.running_jobs("work") if j.status == "running"]
            most_listed = max(most_listed, len(listed))
            time.sleep(0.02)
        assert len(records(path)) == len(ids), daemon.describe()
    finally:
        store.close()
    assert 1 <= most_running <= 2, most_running
    assert 1 <= most_listed <= 2, most_listed


def held_by_child(db_url: str, child: int) -> list[int]:
    """Ids of the jobs the pool child `child` holds (running, claimed or unacknowledged)."""
    rows = sql(
        db_url, "SELECT id FROM forkq_jobs WHERE status = 'running' AND locked_by LIKE ?",
        (f"%:{child}:%",),
    )  # fmt: skip
    return sorted(int(job_id) for (job_id,) in rows)


def freeze_in_a_batch(
    queue: Queue, daemon: Daemon, freeze: dict[str, Any], after: dict[str, Any]
) -> tuple[int, list[int], int]:
    """Quick jobs, `freeze` (it stops the master) and quick `after` jobs in one enqueue: the
    child claims them in growing batches, so it holds jobs on both sides of `freeze` when
    the master stops. Returns (freeze's id, every id, the child's pid)."""
    noop = {"handler": "t.noop", "payload": {}, "queue": "work"}
    ids = queue.enqueue_many([*[noop] * 60, freeze, *[after] * 5])
    master = psutil_process(daemon.pid)
    wait_until(lambda: master.status() == "stopped", timeout=30, message="the master frozen")
    child = wait_until(lambda: daemon.running(ids[60]), timeout=10, message="the child")[0]
    return ids[60], ids, child


def test_a_child_killed_holding_unstarted_jobs_loses_none_and_counts_no_attempt_for_them(
    daemons: Callable[..., Daemon], queue: Queue, tmp_path: Path, db_url: str
) -> None:
    pool = {"workers": 1, "on_success": "keep", "claim_batch": 16}
    daemon = daemons(pools={"work": pool}).start().wait_ready()
    path = tmp_path / "records.txt"
    # The freezing job stops the master, so nothing is handed back while the child holds
    # the quick jobs it claimed behind it.
    freeze = {"handler": "t.stop_master", "payload": {"seconds": 60}, "queue": "work",
              "max_attempts": 1}  # fmt: skip
    quick = {"handler": "t.record", "payload": {"file": str(path)}, "queue": "work"}
    frozen, _, child = freeze_in_a_batch(queue, daemon, freeze, quick)
    behind = [job_id for job_id in held_by_child(db_url, child) if job_id > frozen]
    assert behind, "the child claimed quick jobs behind the freezing one"
    os.kill(child, signal.SIGKILL)
    os.kill(daemon.pid, signal.SIGCONT)
    wait_until(lambda: len(records(path)) == 5, timeout=30, message=daemon.describe())
    marks = ",".join("?" * len(behind))
    rows = dict(sql(db_url, f"SELECT id, attempts FROM forkq_jobs WHERE id IN ({marks})", behind))
    assert {int(a) for a in rows.values()} == {1}, rows  # one attempt each: the one that ran
    wait_until(
        lambda: (
            sql(db_url, "SELECT status, attempts FROM forkq_jobs WHERE id = ?", (frozen,))
            == [("dead", 1)]
        ),
        timeout=10,
        message="the frozen job settled dead (its attempt counted)",
    )


def test_cancelling_a_finished_quick_job_kills_nothing(
    daemons: Callable[..., Daemon], queue: Queue, db_url: str
) -> None:
    """A quick job whose success waits to be written while its child runs a slow job:
    cancelling it never kills the child; it ends done, and the slow job goes on."""
    pool = {"workers": 1, "on_success": "keep", "claim_batch": 16}
    daemon = daemons(pools={"work": pool}).start().wait_ready()
    freeze = {"handler": "t.stop_master", "payload": {"seconds": 3}, "queue": "work"}
    noop = {"handler": "t.noop", "payload": {}, "queue": "work"}
    frozen, _, child = freeze_in_a_batch(queue, daemon, freeze, noop)
    finished = [job_id for job_id in held_by_child(db_url, child) if job_id < frozen]
    assert finished, "its successes wait for the child's next write"
    target = finished[-1]
    assert queue.cancel(target)
    os.kill(daemon.pid, signal.SIGCONT)
    wait_until(
        lambda: (
            dict(
                sql(
                    db_url, "SELECT id, status FROM forkq_jobs WHERE id IN (?, ?)", (target, frozen)
                )
            )
            == {target: "done", frozen: "done"}
        ),
        timeout=20,
        message=f"both done ({daemon.describe()})",
    )
    assert not daemon.events(events.JOB_CANCEL_KILL), daemon.describe()
    assert child in daemon.pool_children("work"), "the slow job's child was not killed"


def test_a_recycled_child_goes_on_claiming_as_the_one_it_replaces(
    daemons: Callable[..., Daemon], queue: Queue, db_url: str
) -> None:
    """A child retiring at max_jobs_per_child hands its claim size to the next one (through
    the master): five jobs per child (no jitter at five), so the first claims 1, 2 and 2
    quick jobs and retires; the next one's first claim takes the freezing job and the four
    behind it at once, where a fresh start would take it alone."""
    pool = {"workers": 1, "on_success": "keep", "claim_batch": 16, "max_jobs_per_child": 5}
    daemon = daemons(pools={"work": pool}).start().wait_ready()
    noop = {"handler": "t.noop", "payload": {}, "queue": "work"}
    freeze = {"handler": "t.stop_master", "payload": {"seconds": 60}, "queue": "work",
              "max_attempts": 1}  # fmt: skip
    ids = queue.enqueue_many([*[noop] * 5, freeze, *[noop] * 4])
    master = psutil_process(daemon.pid)
    wait_until(lambda: master.status() == "stopped", timeout=30, message="the master frozen")
    child = wait_until(lambda: daemon.running(ids[5]), timeout=10, message="the child")[0]
    first = sql(db_url, "SELECT DISTINCT locked_by FROM forkq_jobs WHERE id IN (?, ?)", ids[:2])
    assert first == [(None,)], "the first five ended (keep: done, no holder)"
    assert held_by_child(db_url, child) == ids[5:], "one claim: the freezing job and all behind"
    os.kill(child, signal.SIGKILL)
    os.kill(daemon.pid, signal.SIGCONT)
    wait_until(
        lambda: sql(db_url, "SELECT COUNT(*) FROM forkq_jobs WHERE status = 'done'") == [(9,)],
        timeout=30,
        message=f"the four behind ran ({daemon.describe()})",
    )


@pytest.mark.parametrize("concurrency", [2, 12])
def test_jobs_under_a_limit_are_held_only_while_their_bucket_keeps_room_on_two_daemons(
    daemons: Callable[..., Daemon], queue: Queue, tmp_path: Path, db_url: str, concurrency: int
) -> None:
    """A limited queue: the limit holds across daemons. Near its bound (2, six workers) no
    job is ever held claimed and unstarted (it would hold a slot while waiting behind
    another job); far from it (12) children claim quick jobs in batches, and the held
    jobs count in the limit (claimed and running together never pass it)."""
    limits = f'\n[limits.api]\nqueues = ["work"]\nconcurrency = {concurrency}\n'
    made = [daemons(pools={"work": {"workers": 3}}, name=f"d{n}") for n in (1, 2)]
    for daemon in made:
        daemon.write_config(
            text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + limits
        )
        daemon.start().wait_ready()
    path = tmp_path / "records.txt"
    slow = {"handler": "t.record", "payload": {"file": str(path), "seconds": 1.0}, "queue": "work"}
    quick = {"handler": "t.record", "payload": {"file": str(path)}, "queue": "work"}
    jobs = [*[quick] * 40, *[slow, *[quick] * 5] * 3]  # quick ones first: batches would grow
    queue.enqueue_many(jobs)
    most_held = most_counted = 0  # jobs one child holds at once, and all children
    deadline = time.monotonic() + 60
    while len(records(path)) < len(jobs) and time.monotonic() < deadline:
        held = sql(
            db_url,
            "SELECT locked_by, COUNT(*) FROM forkq_jobs WHERE status = 'running' GROUP BY locked_by",
        )
        most_held = max([most_held, *(int(n) for _, n in held)])
        most_counted = max(most_counted, sum(int(n) for _, n in held))
        time.sleep(0.01)
    seen = records(path)
    assert len(seen) == len(jobs), made[0].describe()
    if concurrency == 2:
        assert most_held == 1, "a child held a job behind the one it ran, and its limit slot"
    else:
        assert most_held > 1, "quick jobs far from the bound were claimed one at a time"
    assert most_counted <= concurrency
    assert most_at_once([(start, end) for _, start, end in seen.values()]) <= concurrency


def most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def psutil_process(pid: int) -> Any:
    import psutil

    return psutil.Process(pid)


def test_a_daemon_killed_with_its_master_counts_no_attempt_for_unstarted_jobs(
    daemons: Callable[..., Daemon], queue: Queue, tmp_path: Path, db_url: str
) -> None:
    """Master and child SIGKILLed while the child holds claimed, unstarted jobs: nobody is
    left to say what ran, and the next boot settles them without charging an attempt."""
    pool = {"workers": 1, "on_success": "keep", "claim_batch": 16}
    daemon = daemons(pools={"work": pool}).start().wait_ready()
    path = tmp_path / "records.txt"
    freeze = {"handler": "t.stop_master", "payload": {"seconds": 0.5}, "queue": "work"}
    quick = {"handler": "t.record", "payload": {"file": str(path)}, "queue": "work"}
    frozen, _, child = freeze_in_a_batch(queue, daemon, freeze, quick)
    behind = [job_id for job_id in held_by_child(db_url, child) if job_id > frozen]
    assert behind, "the child claimed quick jobs behind the freezing one"
    daemon.kill_all()
    daemon.start()
    # The freezing job's start was never recorded (its master was frozen): it runs again
    # and freezes the new master once more, which the test thaws.
    master = psutil_process(daemon.pid)
    wait_until(lambda: master.status() == "stopped", timeout=30, message="the master frozen")
    os.kill(daemon.pid, signal.SIGCONT)
    wait_until(lambda: len(records(path)) == 5, timeout=30, message=daemon.describe())
    marks = ",".join("?" * len(behind))
    rows = dict(sql(db_url, f"SELECT id, attempts FROM forkq_jobs WHERE id IN ({marks})", behind))
    assert {int(a) for a in rows.values()} == {1}, rows  # one attempt each: the one that ran
