"""What a producer learns of a job's end: `Queue.result(id)` and `Queue.wait(id, timeout)`.

A job's state comes from its row (or its archived row) while it exists; what it returned
from forkq_results when its handler or pool keeps results (`keep_result`). A job deleted
on success that kept nothing is `gone`: it ended, and nothing says how. `wait` reads the
job, then naps on a same-host wake-up (wake/waiters.py) or, failing that, a poll that
backs off from POLL_FIRST to POLL_MOST seconds: never a tight loop.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from supervisor.store import Store
from supervisor.store.results import owner_host_pid
from supervisor.wake.places import store_identity
from supervisor.wake.waiters import Waiter

POLL_FIRST = 0.01  # seconds: the first nap of a wait
POLL_MOST = 1.0  # seconds: the longest, after doubling (a same-host end wakes it sooner)
# A job's state as `result` names it: waiting to run, running, or one of its ends.
WAITING_STATES = frozenset({"ready", "scheduled", "waiting"})
RUNNING_STATES = frozenset({"running", "cancelling"})
ENDED_STATES = frozenset({"done", "dead", "cancelled", "gone"})


@dataclass(frozen=True)
class JobResult:
    """Where a job stands and, once it is done, what its handler returned.

    `state`: ready, scheduled, running, cancelling (not ended), done, dead, cancelled, or
    gone (no row: deleted on success without a kept result, pruned, or never enqueued).
    `kept`: a return value was kept (`value` is it; None is a value too).
    """

    job_id: int
    state: str
    kept: bool = False
    value: Any = None

    @property
    def finished(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "done"


def read_result(store: Store, job_id: int) -> JobResult:
    """The job's state and kept value now (two primary-key reads)."""
    state = store.job_state(job_id)
    record = store.job_result(job_id) if store.has_attempts_table() else None
    if state is None:
        if record is None:
            return JobResult(job_id, "gone")
        state = "done" if record["status"] == "succeeded" else "dead"
    if state == "done" and record is not None and record["status"] == "succeeded":
        raw = record["return_value"]
        return JobResult(job_id, state, True, None if raw is None else json.loads(raw))
    return JobResult(job_id, state)


def wait_result(store: Store, job_id: int, timeout: float | None) -> JobResult:
    """Wait until the job has ended (or `timeout` seconds); its result then. TimeoutError
    when it has not ended in time."""
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    nap = POLL_FIRST
    with Waiter(store_identity(store), job_id) as waiter:  # bound before the first read
        while True:
            result = read_result(store, job_id)
            if result.finished:
                return result
            left = POLL_MOST if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {job_id} has not ended ({result.state})")
            # Woken: read again at once (and soon after, if not ended yet); else back off.
            nap = POLL_FIRST if waiter.nap(min(nap, left)) else min(nap * 2, POLL_MOST)


@dataclass(frozen=True)
class AttemptView:
    """One attempt of a job as `forkq show` and the job page list it."""

    attempt: int
    outcome: str  # retry | dead | timeout | died | lease_expired | cancelled | running | done
    started_at: float | None  # epoch seconds
    ended_at: float | None  # None while it runs
    host: str | None
    pid: int | None
    error: str | None


class JobLike(Protocol):
    """What attempt_history reads of a job: a JobRow, or the dashboard's JobListing."""

    @property
    def id(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def attempts(self) -> int: ...
    @property
    def locked_by(self) -> str | None: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...


def attempt_history(store: Store, row: JobLike) -> list[AttemptView]:
    """The job's recorded attempts (those that did not end in its success, the last
    ATTEMPT_SLOTS), then the one its row describes: running now, or its success (whose
    host the row no longer names: a success writes no history)."""
    shown = recorded_attempts(store, row.id)
    started = None if row.started_at is None else row.started_at.timestamp()
    if row.status in RUNNING_STATES and started is not None:
        host, pid = owner_host_pid(row.locked_by)
        shown.append(AttemptView(row.attempts, "running", started, None, host, pid, None))
    elif row.status == "done":
        ended = None if row.finished_at is None else row.finished_at.timestamp()
        shown.append(AttemptView(row.attempts, "done", started, ended, None, None, None))
    return shown


def recorded_attempts(store: Store, job_id: int) -> list[AttemptView]:
    """The attempts kept in forkq_attempts, oldest first: also those of a job deleted on
    success, until its pool's retention prunes them."""
    return [
        AttemptView(
            int(r["attempt"]),
            str(r["outcome"]),
            _seconds(r["started_at"]),
            _seconds(r["ended_at"]),
            r["host"],
            None if r["pid"] is None else int(r["pid"]),
            r["error"],
        )
        for r in store.job_attempts(job_id)
    ]


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)
