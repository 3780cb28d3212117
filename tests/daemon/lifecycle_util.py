"""What the daemon-contract tests share (test_daemon.py, test_daemon_children.py): boot a
daemon and wait until it is ready, wait for a job's state or for the child that runs it,
count jobs by status, read an event's time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from daemon_util import Daemon
from util import count_rows, wait_until

from supervisor.models import JobRow, JobState
from supervisor.store import Store

Factory = Callable[..., Daemon]

KEEP = {"on_success": "keep"}  # done jobs stay visible as `done`


def boot(daemons: Factory, **kwargs: Any) -> Daemon:
    daemon = daemons(**kwargs)
    daemon.start()
    daemon.wait_ready()
    return daemon


def get(store: Store, job_id: int) -> JobRow:
    row = store.get_job(job_id)
    assert row is not None, f"job {job_id} vanished"
    return row


def wait_job(
    store: Store,
    job_id: int,
    predicate: Callable[[JobRow], bool],
    timeout: float = 10.0,
    message: str = "job state",
) -> JobRow:
    def check() -> JobRow | None:
        row = store.get_job(job_id)
        return row if row is not None and predicate(row) else None

    return wait_until(check, timeout=timeout, message=f"job {job_id}: {message}")


def wait_done(store: Store, job_id: int, timeout: float = 10.0) -> JobRow:
    return wait_job(store, job_id, lambda r: r.status == JobState.DONE, timeout, "done")


def wait_running(daemon: Daemon, job_id: int, timeout: float = 10.0) -> int:
    """Until a child's title shows the job; that child's pid."""

    def find() -> int | None:
        for pid, title in daemon.child_titles().items():
            if f" job {job_id} (" in title:
                return pid
        return None

    return wait_until(find, timeout=timeout, message=f"job {job_id} running in a child")


def count_status(db_url: str, status: str) -> int:
    return count_rows(db_url, "forkq_jobs", "status = ?", (status,))


def when(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"]).timestamp()
