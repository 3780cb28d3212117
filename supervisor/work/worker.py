"""The claim → run → ack loop, shared by `forkq work` and the daemon's pool children.

One Worker owns one store connection and one lease owner name. It claims a batch,
runs the jobs one by one, and records outcomes. Successes are acknowledged in
batches (at the end of a claimed batch, or sooner when the buffer is old): if the
process dies before the ack, those jobs run again — at least once, never lost.
Failures are recorded at once. Anything waiting to be written survives a lost
connection and is written after the reconnect.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from types import FrameType
from typing import Any, Protocol

from supervisor import events, logs, registry
from supervisor.config import Config, PoolConfig
from supervisor.errors import (
    ConnectionLost,
    DatabaseError,
    Fail,
    JobTimeout,
    Retry,
    Snooze,
    TransientDatabaseError,
)
from supervisor.fate import failure_outcome, max_attempts_for
from supervisor.models import JobRow
from supervisor.observe import metrics
from supervisor.policy import DEFAULT_MAX_SNOOZES, truncate_error
from supervisor.store import Store
from supervisor.store import limits as flow
from supervisor.work.command import CommandFailed
from supervisor.work.snooze import SNOOZED, snooze_outcome

LEASE_MARGIN = 30.0  # seconds a lease outlives the job's timeout: the master kills first
ACK_MAX_AGE = 0.2  # seconds a success may wait in the buffer before it is written
PAUSE_CACHE = 2.0  # seconds the paused-queue list is trusted
MAX_BACKOFF = 10.0  # seconds between reconnect attempts at most
QUICK_JOB = 0.01  # seconds: jobs faster than this on average are claimed in growing batches


class WorkerEvents(Protocol):
    """What the worker tells its surroundings (the master's pipe, the process title)."""

    def job_started(self, job: JobRow, timeout: float) -> None: ...
    def job_ran(self, job: JobRow) -> None: ...
    def job_finished(self, job: JobRow, outcome: str) -> None: ...
    def idle(self) -> None: ...


class NoEvents:
    def job_started(self, job: JobRow, timeout: float) -> None:
        pass

    def job_ran(self, job: JobRow) -> None:
        pass

    def job_finished(self, job: JobRow, outcome: str) -> None:
        pass

    def idle(self) -> None:
        pass


class JobContext:
    """The `job` argument of a handler: what it may know and do about its own job."""

    def __init__(self, row: JobRow, worker: Worker) -> None:
        self.id = row.id
        self.queue = row.queue
        self.handler = row.handler
        self.attempts = row.attempts
        self.max_attempts = row.max_attempts
        self.priority = row.priority
        self.unique_key = row.unique_key
        self.enqueued_at: datetime = row.enqueued_at
        self.run_at: datetime = row.run_at
        self._worker = worker

    def heartbeat(self) -> bool:
        """Extend this job's lease (for work longer than the lease). False if it was lost.

        False, touching nothing, in a process the handler forked: the connection is the
        worker's.
        """
        if os.getpid() != self._worker.pid:
            return False
        return self._worker.extend_lease([self.id])

    def __repr__(self) -> str:
        return f"<job {self.id} {self.handler} attempt {self.attempts}>"


@dataclass
class Pending:
    """Outcomes waiting to be written: successes by on_success mode, and failures."""

    successes: dict[str, list[int]] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    oldest: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.failures) or any(self.successes.values())


@dataclass
class WorkerStats:
    jobs: int = 0  # jobs run by this worker (recycling, --max-jobs)


class Worker:
    def __init__(
        self,
        store: Store,
        config: Config,
        queues: Sequence[str],
        owner: str,
        events: WorkerEvents | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.queues = list(queues)
        self.owner = owner
        self.pid = os.getpid()  # a handler's forked copy is another pid: it never goes on
        self.events = events or NoEvents()
        self.log = logs.get()
        self.stopping = False
        self.retire_reason: str | None = None  # set after a job: finish up and exit
        self.retire_check: Callable[[], str | None] = lambda: None
        self.stats = WorkerStats()
        self.held: list[JobRow] = []  # claimed and not yet run
        self.pending = Pending()
        self._lease_until = 0.0  # monotonic time the current leases run out
        self._paused: set[str] = set()
        self._paused_at = -PAUSE_CACHE
        self._backoff = 0.0
        self._pools: dict[str, PoolConfig] = {}
        self._batch = 1  # the claim size grows while jobs are quick: see claim_size
        self.max_jobs: int | None = None  # `forkq work --max-jobs`: claim no more than this
        # [limits]: None without any, and then claims are exactly as without the feature.
        self.limits = flow.plan_for(config, _handler_queues())

    # --- settings per queue --------------------------------------------------------------

    def pool(self, queue: str) -> PoolConfig:
        """Settings of the queue's pool (looked up several times per job, so kept in a dict)."""
        pool = self._pools.get(queue)
        if pool is None:
            pool = self._pools[queue] = self.config.pool(queue) or PoolConfig(name=queue)
        return pool

    def job_timeout(self, row: JobRow) -> float:
        registered = registry.get(row.handler)
        return (registered.timeout if registered and registered.timeout else None) or self.pool(
            row.queue
        ).timeout

    # --- the loop ------------------------------------------------------------------------

    def work_once(self) -> int:
        """Claim one batch from the first queue that has work and run it; 0 when all are empty.

        Successes of the previous batch are recorded in the claim's own transaction.
        """
        self.flush_failures()
        if self.held:  # a batch interrupted by a lost connection: finish it first
            count = len(self.held)
            self._run_held()
            return count
        for queue in self.queues:
            if self.stopping or self.retire_reason:
                return 0
            if queue in self.paused():
                continue
            pool = self.pool(queue)
            done = self.pending.successes
            size, lease = self.claim_size(pool), pool.timeout + LEASE_MARGIN
            if self.limits:
                batch, written = flow.complete_and_claim(
                    self.store, self.limits, done, queue, self.owner, size, lease
                )
            else:
                batch, written = self.store.complete_and_claim(done, queue, self.owner, size, lease)
            self._acknowledged(done, written)
            if batch:
                self._lease_until = time.monotonic() + pool.timeout + LEASE_MARGIN
                self.held = list(batch)
                self._run_held()
                return len(batch)
        self.flush()  # nothing claimed (paused, stopping): never go idle with unwritten outcomes
        return 0

    def claim_size(self, pool: PoolConfig) -> int:
        """How many jobs to claim now.

        Slow start: one job, doubling per batch up to `claim_batch` while jobs are quick.
        A batch of slow jobs held by one child would sit out of reach of its idle siblings
        and of the pool's growth; quick ones are where batching pays. Never more than may
        still run under `max_jobs` (the rest would be handed back).
        """
        size = min(pool.claim_batch, self._batch)
        if self.max_jobs is not None:
            size = min(size, self.max_jobs - self.stats.jobs)
        return max(1, size)

    def _run_held(self) -> None:
        started, count = time.monotonic(), len(self.held)
        self._run_batch()
        quick = (time.monotonic() - started) / max(1, count) < QUICK_JOB
        self._batch = min(self._batch * 2, 1024) if quick else 1

    def _run_batch(self) -> None:
        while self.held and not self.stopping and not self.retire_reason:
            self._ensure_lease(self.held[0])
            # Popped before it runs: a retry after a lost write never runs it again.
            row = self.held.pop(0)
            self.run_job(row)
            self.retire_reason = self.retire_check()
            if self.pending.oldest and time.monotonic() - self.pending.oldest > ACK_MAX_AGE:
                self.flush()
        # Successes wait for the next claim's transaction, unless this worker stops now.
        if self.held or self.stopping or self.retire_reason:
            self.flush()
        if self.held:  # stopping or retiring: hand back what we never started, uncounted
            self.release_held()

    def safely(self, step: Callable[[], int]) -> int:
        """Run a loop step; a lost database means back-off and retry, never a crash."""
        try:
            result = step()
        except (ConnectionLost, TransientDatabaseError) as exc:
            metrics.db_error()
            self._backoff = min(MAX_BACKOFF, max(0.25, self._backoff * 2))
            delay = self._backoff * random.uniform(0.8, 1.2)
            event = "db_unreachable" if isinstance(exc, ConnectionLost) else "db_contention"
            self.log.warning(event, error=str(exc), retry_in=round(delay, 2))
            self.sleep(delay)
            return 0
        if self._backoff:
            self.log.info("db_reconnected")
            self._backoff = 0.0
        return result

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def paused(self) -> set[str]:
        now = time.monotonic()
        if now - self._paused_at >= PAUSE_CACHE:
            self._paused, self._paused_at = self.store.paused_queues(), now
        return self._paused

    # --- one job -------------------------------------------------------------------------

    def run_job(self, row: JobRow) -> str:
        """Run one claimed job and queue its outcome for writing; returns the outcome."""
        started = time.monotonic()
        timeout = self.job_timeout(row)
        self.events.job_started(row, timeout)
        outcome, error, delay, dead = self._execute(row, timeout)
        duration = time.monotonic() - started
        # The handler is done: writing its outcome is no longer the job's time, so a slow
        # or unreachable database never gets the child killed as overtime.
        self.events.job_ran(row)
        self.stats.jobs += 1
        if outcome not in ("done", SNOOZED):
            outcome = "dead" if dead else "retry"
        metrics.job_finished(row.queue, row.handler, outcome, duration)  # a no-op while off
        try:
            if outcome == "done":
                self._queue_success(row)
            elif outcome == SNOOZED:
                self._queue_snooze(row, error, delay or 0.0)  # written at once
            else:
                self._queue_failure(row, error, delay, dead)  # written at once
        finally:  # written or still pending (the next flush retries it): the job has ended
            self.events.job_finished(row, outcome)
            if self.limits:  # its slot can go to a job parked on its limits
                self.limits.ended(row.handler, row.queue, row.limit_key)
        log = self.log.info if outcome in ("done", SNOOZED) else self.log.warning
        log(
            events.JOB_FINISHED,
            job_id=row.id,
            handler=row.handler,
            queue=row.queue,
            attempt=row.attempts,
            outcome=outcome,
            duration=round(duration, 4),
            **({"error": error.splitlines()[0][:300]} if error else {}),
            **({"delay": delay} if outcome == SNOOZED else {}),
        )
        return outcome

    def _execute(self, row: JobRow, timeout: float) -> tuple[str, str, float | None, bool]:
        """(outcome, error, requested delay, permanent) for one attempt."""
        registered = registry.get(row.handler)
        if registered is None:
            return (
                "failed",
                f"unknown handler {row.handler!r}: no loaded module registered it",
                None,
                True,
            )
        try:
            payload = json.loads(row.payload)
        except (ValueError, TypeError, RecursionError) as exc:
            return "failed", f"payload is not valid JSON: {exc}", None, True
        try:
            with soft_timeout(timeout):
                try:
                    registered.func(payload, JobContext(row, self))
                finally:
                    exit_if_forked(self.pid)
        except JobTimeout:
            return "failed", f"timed out after {timeout:g}s", None, False
        except Retry as exc:
            return "failed", f"retry requested: {exc.reason}", exc.delay, False
        except Snooze as exc:
            return snooze_outcome(exc.delay, exc.reason)
        except Fail as exc:
            return "failed", f"failed permanently: {exc}", None, True
        except Exception as exc:
            return "failed", _describe(exc), None, False
        return "done", "", None, False

    def _queue_success(self, row: JobRow) -> None:
        mode = self.pool(row.queue).on_success
        self.pending.successes.setdefault(mode, []).append(row.id)
        self.pending.oldest = self.pending.oldest or time.monotonic()

    def _queue_snooze(self, row: JobRow, reason: str, delay: float) -> None:
        """Back after `delay` without using an attempt (schema 7 counts it; before it, a
        snooze is a retry, so attempts still bound it)."""
        if not self.store.snoozes_counted():
            self._queue_failure(row, f"snoozed ({reason}); schema 7 counts snoozes", delay, False)
            return
        registered = registry.get(row.handler)
        most = registered.max_snoozes if registered else DEFAULT_MAX_SNOOZES
        self.pending.failures.append(
            {"job_id": row.id, "snooze": delay, "max_snoozes": most, "reason": reason}
        )
        self.flush()  # written at once, as failures are

    def _queue_failure(self, row: JobRow, error: str, delay: float | None, permanent: bool) -> None:
        if permanent:
            dead, wait, message = True, 0.0, error
        else:
            decision = failure_outcome(row, error, delay)
            dead, wait, message = decision.dead, decision.delay, decision.error
        self.pending.failures.append(
            {
                "job_id": row.id,
                "error": truncate_error(message),
                "dead": dead,
                "delay": wait,
                "max_attempts": max_attempts_for(row),
            }
        )
        self.flush()  # failures are written at once

    # --- writing outcomes ----------------------------------------------------------------

    def flush(self) -> None:
        """Write pending outcomes; on a lost connection they stay pending for the next try."""
        for mode, ids in list(self.pending.successes.items()):
            if ids:
                self._acknowledged({mode: ids}, self.store.complete(self.owner, ids, mode))
        self.flush_failures()

    def _acknowledged(self, done: dict[str, list[int]], written: int) -> None:
        """Forget successes once written; fewer rows than ids means leases were taken over."""
        expected = sum(len(ids) for ids in done.values())
        if written < expected:
            self.log.warning(
                "lease_lost", jobs=expected - written, note="another worker holds them now"
            )
        for mode in list(done):
            self.pending.successes.pop(mode, None)
        if not any(self.pending.successes.values()):
            self.pending.oldest = 0.0

    def flush_failures(self) -> None:
        while self.pending.failures:
            failure = self.pending.failures[0]
            if "snooze" in failure:
                self._write_snooze(failure)
                self.pending.failures.pop(0)
                continue
            if not self.store.fail(
                self.owner,
                failure["job_id"],
                failure["error"],
                dead=failure["dead"],
                delay=failure["delay"],
                max_attempts=failure["max_attempts"],
            ):
                self.log.warning("lease_lost", job_id=failure["job_id"])
            self.pending.failures.pop(0)

    def _write_snooze(self, snooze: dict[str, Any]) -> None:
        result = self.store.snooze(
            self.owner, snooze["job_id"], snooze["snooze"], snooze["max_snoozes"], snooze["reason"]
        )
        if result == "lost":
            self.log.warning("lease_lost", job_id=snooze["job_id"])
        elif result == "dead":
            self.log.warning(
                "job_snoozed_too_often", job_id=snooze["job_id"], max_snoozes=snooze["max_snoozes"]
            )

    def release_held(self) -> None:
        ids = [row.id for row in self.held]
        self.held = []
        try:
            self.store.release(self.owner, ids, count_attempt=False)
        except DatabaseError as exc:  # their leases expire and they run again
            self.log.warning("release_failed", jobs=len(ids), error=str(exc))

    def extend_lease(self, ids: Sequence[int]) -> bool:
        lease = max(self.pool(q).timeout for q in self.queues) + LEASE_MARGIN
        return self.store.extend_leases(self.owner, ids, lease) == len(ids)

    def _ensure_lease(self, row: JobRow) -> None:
        """Before a job starts, make sure every held lease outlives its timeout.

        Only when less than the timeout plus half the margin is left: a fresh lease has
        the whole margin, so a batch of short jobs never pays for an extension.
        """
        timeout = self.job_timeout(row)
        if self._lease_until - time.monotonic() < timeout + LEASE_MARGIN / 2:
            self.store.extend_leases(self.owner, [r.id for r in self.held], timeout + LEASE_MARGIN)
            self._lease_until = time.monotonic() + timeout + LEASE_MARGIN

    def shutdown(self) -> None:
        """Write what is pending and hand back unstarted jobs; best effort."""
        try:
            self.flush()
        except DatabaseError as exc:
            self.log.warning("flush_failed", error=str(exc))
        if self.held:
            self.release_held()


@contextmanager
def soft_timeout(seconds: float) -> Iterator[None]:
    """Raise JobTimeout inside the handler after `seconds` (SIGALRM; main thread only).

    The handler is installed once per process; each job only arms and disarms the timer.
    """
    if signal.getsignal(signal.SIGALRM) is not _expire:
        signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def exit_if_forked(worker_pid: int) -> None:
    """End, at once, a copy of the worker that a handler forked and that came back here.

    A handler that forks and returns (or raises) in both processes brings its copy back
    into the worker: it would go on as a second, unsupervised worker under the same lease
    name, writing the job's outcome twice and talking on the parent's database socket.
    The copy writes nothing and flushes nothing (its buffers hold the parent's output
    too): `os._exit` with 0 after a return, the code of a SystemExit, else 1.
    """
    if os.getpid() == worker_pid:
        return
    exc = sys.exc_info()[1]
    code = 0
    if isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    elif exc is not None:
        code = 1
    os._exit(code)


def _handler_queues() -> dict[str, str]:
    """Each registered handler's queue: where [limits] that name handlers apply first."""
    return {name: h.queue for name in registry.names() if (h := registry.get(name)) is not None}


def _expire(signum: int, frame: FrameType | None) -> None:
    raise JobTimeout()


def _describe(exc: BaseException) -> str:
    """`Type: message` and the innermost frames, for last_error; a command's failure is its
    exit status and stderr, where frames of the runner would only push its tail out."""
    if isinstance(exc, CommandFailed):
        return str(exc)
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
    return f"{type(exc).__name__}: {exc}\n" + "".join(frames[-4:])
