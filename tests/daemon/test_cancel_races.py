"""Every cancelled job reaches one final state (done or cancelled) within seconds, also
when the cancel races the job's end, arrives during a graceful stop, or names a job
whose holder died (SPEC "Job lifecycle": within 2 s; issue 22, items 5 and 6).

Deadlines here are far below the lease (pool timeout 60 s + 30 s), which is how long such
jobs stayed `cancelling` before."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

from daemon_util import Daemon
from util import sql, wait_until

from supervisor import Queue, events
from supervisor.models import JobState

FINAL = {JobState.DONE, JobState.CANCELLED}


def statuses(db_url: str, ids: list[int]) -> dict[int, str]:
    marks = ",".join("?" * len(ids))
    return {
        int(i): str(s)
        for i, s in sql(db_url, f"SELECT id, status FROM forkq_jobs WHERE id IN ({marks})", ids)
    }


def all_final(db_url: str, ids: list[int]) -> dict[int, str] | None:
    found = statuses(db_url, ids)
    return found if all(v in FINAL for v in found.values()) else None


def test_cancels_racing_the_end_of_jobs_all_end_done_or_cancelled(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    daemon = daemons(pools={"work": {"workers": 4, "timeout": 60, "on_success": "keep"}})
    daemon.start().wait_ready()
    queue = Queue(db_url)
    rng = random.Random(22)
    try:
        ids = queue.enqueue_many(
            [{"handler": "t.sleep", "payload": {"seconds": 0.3}, "queue": "work"}] * 24
        )
        due: dict[int, float] = {}  # job -> when to cancel it: within ±60 ms of its end
        deadline = time.monotonic() + 60
        while len(due) < len(ids) and time.monotonic() < deadline:
            now = time.monotonic()
            for job_id in ids:
                if job_id not in due and daemon.running(job_id):
                    due[job_id] = now + 0.3 + rng.uniform(-0.06, 0.06)
            for job_id, at in list(due.items()):
                if 0 < at <= now:
                    queue.cancel(job_id)
                    due[job_id] = -1.0
            if all(s in FINAL for s in statuses(db_url, ids).values()):
                break
            time.sleep(0.005)
        for job_id, at in due.items():
            if at > 0:
                queue.cancel(job_id)
        final = wait_until(
            lambda: all_final(db_url, ids),
            timeout=10,
            message=f"every job done or cancelled ({daemon.describe()})",
        )
    finally:
        queue.close()
    assert set(final) == set(ids)
    print(
        f"\n[figures] {sum(v == 'cancelled' for v in final.values())} cancelled, "
        f"{sum(v == 'done' for v in final.values())} done"
    )


def test_a_cancel_during_a_graceful_stop_is_carried_out(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    daemon = daemons(
        pools={"work": {"workers": 1, "timeout": 60}}, supervisor={"shutdown_timeout": 30}
    )
    daemon.start().wait_ready()
    queue = Queue(db_url)
    try:
        job_id = queue.enqueue("t.hang", {}, queue="work")
        wait_until(lambda: daemon.running(job_id), timeout=10, message="the job running")
        daemon.send_signal(signal.SIGTERM)
        daemon.wait_event(events.MASTER_STOPPING)
        assert queue.cancel(job_id) is True
        wait_until(
            lambda: statuses(db_url, [job_id]) == {job_id: "cancelled"},
            timeout=10,
            message=f"the job cancelled during the drain ({daemon.describe()})",
        )
        assert daemon.wait_exit(timeout=10) == 0  # the drain is over: not the 30 s deadline
    finally:
        queue.close()


def test_cancelling_jobs_of_a_killed_daemon_end_cancelled_when_it_restarts(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    daemon = daemons(pools={"work": {"workers": 1, "timeout": 60}})
    daemon.start().wait_ready()
    queue = Queue(db_url)
    try:
        job_id = queue.enqueue("t.sleep", {"seconds": 60}, queue="work")
        wait_until(lambda: daemon.running(job_id), timeout=10, message="the job running")
        daemon.kill_all()  # master and child SIGKILLed: nobody carries the cancel out
        assert queue.cancel(job_id) is True
        assert statuses(db_url, [job_id]) == {job_id: "cancelling"}
        daemon.start().wait_ready()
        wait_until(
            lambda: statuses(db_url, [job_id]) == {job_id: "cancelled"},
            timeout=10,
            message=f"settled at boot ({daemon.describe()})",
        )
    finally:
        queue.close()
