"""Cancelling a running job (SPEC: Job lifecycle): the master whose child runs it sees
the request within a second, kills the child's process group, and the job ends
`cancelled`, never retried, with who cancelled it in last_error."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from cli_util import forkq, ok
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
        # The kill was ours, for the cancel: no "worker died" line about the job, and
        # the child's exit line says why it went (as its metric's label does).
        assert daemon.events(events.JOB_SETTLED, job_id=job_id) == []
        [exited] = daemon.events(events.CHILD_EXITED, child_pid=child)
        assert exited["reason"] == "cancelled", exited
        print(f"\n[figures] running job cancelled after {took:.2f} s")
    finally:
        queue.close()
    assert daemon.stop() == 0, daemon.describe()


def test_a_cancelled_running_attempt_is_kept_in_the_jobs_history(
    daemon: Daemon, db_url: str, tmp_path: Path
) -> None:
    """Every attempt that does not succeed is kept (README: Every attempt); before, a
    running job that was cancelled had no attempt in `forkq show` or on the job page."""
    daemon.start().wait_ready()
    queue = Queue(db_url)
    try:
        job_id = queue.enqueue("t.sleep", {"seconds": 60}, queue="work")
        [child] = wait_until(lambda: daemon.running(job_id), timeout=10, message="the job running")
        assert ok(forkq(tmp_path, "cancel", str(job_id), database=db_url)).startswith("cancelling")
        wait_until(
            lambda: (r := queue.get(job_id)) and r.status == JobState.CANCELLED,
            timeout=10,
            message="the job cancelled",
        )
    finally:
        queue.close()
    shown = json.loads(ok(forkq(tmp_path, "show", str(job_id), "--json", database=db_url)))
    [attempt] = shown["attempt_history"]
    assert (attempt["attempt"], attempt["outcome"], attempt["pid"]) == (1, "cancelled", child)
    assert attempt["error"] == shown["last_error"] and "(forkq cancel)" in attempt["error"]
    assert attempt["started_at"] <= attempt["ended_at"]
    text = ok(forkq(tmp_path, "show", str(job_id), database=db_url))
    assert re.search(r"^  1 +cancelled ", text, re.MULTILINE), text
    assert daemon.stop() == 0, daemon.describe()
