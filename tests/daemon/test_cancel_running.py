"""Cancelling a running job (SPEC: Job lifecycle): the master whose child runs it sees
the request within a second, kills the child's process group, and the job ends
`cancelled`, never retried, with who cancelled it in last_error."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from daemon_util import Daemon
from util import wait_until

from supervisor import Queue, events
from supervisor.models import JobState


@pytest.fixture
def daemon(tmp_path: Path, db_url: str) -> Iterator[Daemon]:
    made = Daemon(tmp_path, db_url, pools={"work": {"workers": 1, "timeout": 120}})
    yield made
    made.kill_all()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_running_job_is_cancelled_and_its_child_killed(daemon: Daemon, db_url: str) -> None:
    daemon.start().wait_ready()
    queue = Queue(db_url)
    try:
        job_id = queue.enqueue("t.sleep", {"seconds": 60}, queue="work", max_attempts=5)
        [child] = wait_until(lambda: daemon.running(job_id), timeout=10, message="the job running")
        asked = time.monotonic()
        assert queue.cancel(job_id) is True
        row = wait_until(
            lambda: (r := queue.get(job_id)) and r.status == JobState.CANCELLED and r,
            timeout=10,
            message="the job cancelled",
        )
        took = time.monotonic() - asked
        wait_until(lambda: gone(child), timeout=10, message="the child killed")
        assert row.attempts == 1 and row.finished_at is not None
        assert "cancelled by" in (row.last_error or "")
        # The master logs job_cancelled after its commit: the row can be seen first.
        daemon.wait_event(
            events.JOB_CANCELLED, timeout=10, where=lambda e: e.get("job_id") == job_id
        )
        time.sleep(2)  # never retried: it stays cancelled, and nothing runs it again
        again = queue.get(job_id)
        assert again is not None and again.status == JobState.CANCELLED
        assert not daemon.running(job_id)
        assert queue.cancel(job_id) is False  # a cancelled job cannot be cancelled again
        print(f"\n[figures] running job cancelled after {took:.2f} s")
    finally:
        queue.close()
    assert daemon.stop() == 0
