"""The daemon's contract for its children (SPEC "The daemon"), checked against the real
`forkq run` from outside, on both backends: a job past its timeout (hard kill or soft
failure), a child killed under its job, children recycled after max_jobs_per_child,
max_child_lifetime or over their memory limit, and a dynamic pool growing with the backlog.
Boot, signals, reload and the master itself: test_daemon.py.
"""

from __future__ import annotations

import os
import signal
import time

from daemon_util import (
    daemons_fixture,  # noqa: F401  (the `daemons` fixture)
)
from lifecycle_util import (
    KEEP,
    Factory,
    boot,
    count_status,
    get,
    wait_done,
    wait_job,
    wait_running,
)
from util import wait_until

from supervisor import Queue, events
from supervisor.models import JobState
from supervisor.store import Store

# --- timeouts and dead children -----------------------------------------------------------------


def test_hung_handler_is_killed_past_its_timeout_and_others_keep_flowing(
    daemons: Factory, store: Store, queue: Queue, db_url: str
) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 2, "timeout": 1, "claim_batch": 1, **KEEP}})
    hung = queue.enqueue("t.hang", queue="work", max_attempts=1)
    hung_pid = wait_running(daemon, hung)

    others = queue.enqueue_many([{"handler": "t.noop", "queue": "work"} for _ in range(10)])
    wait_until(
        lambda: all(get(store, i).status == JobState.DONE for i in others),
        timeout=10,
        message="the other jobs done while one child hangs",
    )

    row = wait_job(store, hung, lambda r: r.status == JobState.DEAD, timeout=20, message="dead")
    assert "killed after 1s timeout" in (row.last_error or "")
    assert row.attempts == 1
    assert daemon.events(events.JOB_TIMED_OUT, job_id=hung, child_pid=hung_pid)
    exited = daemon.wait_event(events.CHILD_EXITED, where=lambda e: e["child_pid"] == hung_pid)
    assert exited[0]["status"].startswith("killed by SIG")
    assert exited[0]["reason"] == "timeout", exited  # as its metric's label says
    wait_until(
        lambda: (
            len(daemon.pool_children("work")) == 2 and hung_pid not in daemon.pool_children("work")
        ),
        timeout=10,
        message="a replacement child",
    )


def test_handler_past_its_timeout_fails_softly_without_a_kill(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 1, "timeout": 1, **KEEP}})
    job_id = queue.enqueue("t.sleep", {"seconds": 5}, queue="work", max_attempts=1)
    child = wait_running(daemon, job_id)

    row = wait_job(store, job_id, lambda r: r.status == JobState.DEAD, timeout=10, message="dead")
    assert "timed out after 1s" in (row.last_error or "")
    assert "killed" not in (row.last_error or "")
    assert row.attempts == 1
    assert daemon.pool_children("work") == [child]
    assert daemon.events(events.JOB_TIMED_OUT) == []
    assert daemon.events(events.CHILD_EXITED) == []


def test_killed_child_job_is_settled_at_once_and_the_child_replaced(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    # timeout 60: the lease runs 90 s, so only the master's reaping can settle it in time
    daemon = boot(daemons, pools={"work": {"workers": 1, "timeout": 60, **KEEP}})
    job_id = queue.enqueue("t.sleep", {"seconds": 30}, queue="work")
    child = wait_running(daemon, job_id)
    owner = get(store, job_id).locked_by
    killed_at = time.monotonic()

    os.kill(child, signal.SIGKILL)

    row = wait_job(
        store,
        job_id,
        lambda r: r.locked_by != owner,
        timeout=5,
        message="settled by the master",
    )
    assert time.monotonic() - killed_at < 5
    assert row.attempts == 1
    assert row.status == JobState.READY  # back-off of the first retry is >= 1 s
    assert "worker died (killed by SIGKILL)" in (row.last_error or "")
    # The master logs once its write is done: the row can be seen a moment before the line.
    wait_until(
        lambda: daemon.events(events.JOB_SETTLED, job_id=job_id), timeout=5, message="job_settled"
    )
    wait_until(
        lambda: (kids := daemon.pool_children("work")) and child not in kids,
        timeout=10,
        message="a new child",
    )


# --- recycling ---------------------------------------------------------------------------------------


def test_child_is_recycled_after_max_jobs_per_child(
    daemons: Factory, store: Store, queue: Queue, db_url: str
) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 1, "max_jobs_per_child": 5, **KEEP}})
    queue.enqueue_many([{"handler": "t.noop", "queue": "work"} for _ in range(20)])

    wait_until(lambda: count_status(db_url, "done") == 20, timeout=20, message="20 jobs done")
    exits = daemon.wait_event(
        events.CHILD_EXITED,
        where=lambda e: "max_jobs_per_child" in (e.get("reason") or ""),
        count=3,
        timeout=5,
    )
    assert all(e["jobs"] <= 5 for e in exits), [e["jobs"] for e in exits]
    spawned = {e["child_pid"] for e in daemon.events(events.CHILD_SPAWNED)}
    assert len(spawned) >= 4


def test_child_is_recycled_after_max_child_lifetime_even_when_idle(daemons: Factory) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 1, "max_child_lifetime": 2}})
    first = daemon.pool_children("work")

    exited = daemon.wait_event(
        events.CHILD_EXITED, where=lambda e: e.get("reason") == "max_child_lifetime", timeout=8
    )
    assert exited[0]["child_pid"] in first
    wait_until(
        lambda: (kids := daemon.pool_children("work")) and not set(kids) & set(first),
        timeout=5,
        message="a replacement child",
    )


def test_child_is_recycled_after_max_child_lifetime_while_busy(
    daemons: Factory, queue: Queue, db_url: str
) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 1, "max_child_lifetime": 2, **KEEP}})
    first = daemon.pool_children("work")
    ids = queue.enqueue_many(
        [{"handler": "t.sleep", "payload": {"seconds": 0.1}, "queue": "work"} for _ in range(200)]
    )  # 20 s of work: the child must retire between two jobs, not when the backlog is gone
    exited = daemon.wait_event(
        events.CHILD_EXITED, where=lambda e: e.get("reason") == "max_child_lifetime", timeout=8
    )
    assert exited[0]["child_pid"] in first
    assert count_status(db_url, "done") < len(ids)
    replacement = wait_until(
        lambda: (kids := daemon.pool_children("work")) and not set(kids) & set(first) and kids,
        timeout=5,
        message="a replacement child",
    )
    wait_until(
        lambda: any(e["pid"] in replacement for e in daemon.events(events.JOB_FINISHED)),
        timeout=5,
        message="the replacement working off the backlog",
    )


def test_child_over_its_memory_limit_is_recycled_after_the_job(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 1, "memory_limit_mb": 40, **KEEP}})
    small = queue.enqueue("t.noop", queue="work")
    wait_done(store, small)
    first = daemon.pool_children("work")
    assert daemon.events(events.CHILD_EXITED) == []  # a plain child stays under 40 MB

    job_id = queue.enqueue("t.grow", {"mb": 80}, queue="work")

    row = wait_done(store, job_id)
    assert row.attempts == 1 and row.last_error is None
    exited = daemon.wait_event(
        events.CHILD_EXITED, where=lambda e: "memory_limit_mb" in (e.get("reason") or ""), timeout=5
    )
    assert exited[0]["child_pid"] in first
    assert exited[0]["status"] == "exit 0"
    wait_until(
        lambda: (kids := daemon.pool_children("work")) and not set(kids) & set(first),
        timeout=10,
        message="a replacement child",
    )
    assert daemon.events(events.MEMORY_LIMIT_TOO_LOW) == []  # it grew past it in its job


def test_a_memory_limit_below_a_fresh_workers_size_is_said_once(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    """16 MB (the least accepted) is below what a worker needs to start: every child is
    replaced after its first job. The jobs still run; the master says why, once."""
    daemon = boot(daemons, pools={"work": {"workers": 1, "memory_limit_mb": 16, **KEEP}})
    for _ in range(3):
        wait_done(store, queue.enqueue("t.noop", queue="work"))
    [said] = daemon.wait_event(events.MEMORY_LIMIT_TOO_LOW, timeout=10)
    assert (said["pool"], said["memory_limit_mb"], said["level"]) == ("work", 16, "warning")
    daemon.wait_event(
        events.CHILD_EXITED, where=lambda e: "memory_limit_mb" in e["reason"], count=3
    )
    assert len(daemon.events(events.MEMORY_LIMIT_TOO_LOW)) == 1


# --- dynamic pools ---------------------------------------------------------------------------------


def test_dynamic_pool_grows_with_backlog(daemons: Factory, queue: Queue, db_url: str) -> None:
    daemon = boot(
        daemons, pools={"work": {"workers": 1, "max_workers": 4, "claim_batch": 1, **KEEP}}
    )
    queue.enqueue_many(
        [{"handler": "t.sleep", "payload": {"seconds": 0.2}, "queue": "work"} for _ in range(200)]
    )

    resized = daemon.wait_event(
        events.POOL_RESIZED, where=lambda e: e.get("size", 0) > 1, timeout=15
    )
    assert resized[0]["pool"] == "work"
    most = wait_until(
        lambda: n if (n := len(daemon.pool_children("work"))) > 1 else None,
        timeout=10,
        message="more than one child",
    )
    assert most <= 4
    assert all(e["size"] <= 4 for e in daemon.events(events.POOL_RESIZED))
    assert daemon.stop(timeout=20) == 0
