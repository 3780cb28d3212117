"""One attempt of a claimed job: run its handler and say what it came to.

Every way a handler can end maps onto the closed set of Outcome, as an attempt in
oban's executor ends in one of a few results: it returned (DONE); it raised Snooze
(SNOOZED: back later, no attempt used); it raised Retry or any other exception, or ran
into the soft timeout (RETRY: failed, another attempt may mend it); it raised Fail, or
its handler is unknown or its payload no JSON (DEAD: failed for good). What then
becomes of the job is fate.py's `fate_of_attempt`: a RETRY with no attempt left ends DEAD.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from supervisor import events, logs, masking, registry
from supervisor.errors import RETRY_REQUESTED, DatabaseError, Fail, JobTimeout, Retry, Snooze
from supervisor.models import JobRow
from supervisor.outcomes import Attempt, Outcome, Returned
from supervisor.results import read_result
from supervisor.work import guards
from supervisor.work.exits import CommandFailed, with_stderr
from supervisor.work.guards import arm_soft_timeout, end_soft_timeout, exit_if_forked
from supervisor.work.snooze import snooze_outcome

if TYPE_CHECKING:
    from supervisor.store import Store

DONE = Attempt(Outcome.DONE, "", None, False)  # a handler returned None
PROGRESS_EVERY = 1.0  # seconds between two progress writes of a job, at least


class LeaseHolder(Protocol):
    """What a handler's JobContext needs of the worker running it."""

    @property
    def pid(self) -> int: ...

    def extend_lease(self, ids: Sequence[int]) -> bool: ...

    def record_progress(self, job_id: int, progress: str) -> bool: ...

    @property
    def store(self) -> Store: ...

    @property
    def after_attempt(self) -> list[Callable[[], None]]: ...


class JobContext:
    """The `job` argument of a handler: what it may know and do about its own job."""

    def __init__(self, row: JobRow, worker: LeaseHolder) -> None:
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
        self._progress_at = -PROGRESS_EVERY  # monotonic time of the last progress written
        self._progress_held: str | None = None  # the last report, not written yet (throttled)
        self._parents: list[int] | None = None

    def after_attempt(self, record: Callable[[], None]) -> None:
        """Run `record` once the handler has returned, outside its timeout: the worker calls
        it before it writes the outcome, as that write waits for a busy database without
        the attempt counting as timed out (supervisor.contrib.django's result record)."""
        if os.getpid() == self._worker.pid:  # never from a copy the handler forked
            self._worker.after_attempt.append(record)

    @property
    def parents(self) -> list[int]:
        """The ids this job was enqueued to wait on (depends_on, chain, group.then); [] for
        most jobs. Read from the database when first asked (never at the claim), once."""
        if self._parents is None:
            self._parents = self._worker.store.parents_of(self.id)
        return list(self._parents)

    def parent_results(self) -> dict[int, Any]:
        """{parent id: the value its handler returned} for each parent whose handler or
        pool keeps its result (keep_result); a parent with no kept result is left out."""
        found = (read_result(self._worker.store, parent) for parent in self.parents)
        return {result.job_id: result.value for result in found if result.kept}

    def heartbeat(self) -> bool:
        """Extend this job's lease (for work longer than the lease). False if it was lost.

        False, touching nothing, in a process the handler forked: the connection is the
        worker's. A progress report held back (progress) is written too once it may be.
        """
        if os.getpid() != self._worker.pid:
            return False
        self._write_progress(time.monotonic())
        return self._worker.extend_lease([self.id])

    def progress(self, percent: float, message: str = "") -> bool:
        """Report how far the job has come (0 to 100, and a short message) for the
        dashboard; True when written now. At most one write a second: a report sooner
        than that after the last one written is held back (False), and written once the
        second has passed by a later report or heartbeat, by a command's runner
        (flush_progress) or when the handler ends (end_progress), unless a newer one
        replaces it first. A report in a process the handler forked is dropped (False)."""
        if not 0 <= float(percent) <= 100:
            raise ValueError(f"percent must be between 0 and 100, got {percent!r}")
        if os.getpid() != self._worker.pid:
            return False
        text = masking.masked(str(message))[:300]  # shown on the dashboard: no secret in it
        self._progress_held = json.dumps(
            {"percent": round(float(percent), 1), "message": text, "at": time.time()}
        )
        return self._write_progress(time.monotonic())

    def flush_progress(self) -> float | None:
        """Write the held-back report if its second has passed; the seconds until it may
        be written when one is still held, else None (what a command's poll loop waits)."""
        now = time.monotonic()
        self._write_progress(now)
        if self._progress_held is None:
            return None
        return max(0.0, self._progress_at + PROGRESS_EVERY - now)

    def end_progress(self) -> None:
        """The handler has ended: write its last report if it was held back, whatever the
        throttle (its job's row is still ours), so the row never keeps an older one. Best
        effort: the outcome's write, next, meets a database that fails, and says so."""
        if self._progress_held is None or os.getpid() != self._worker.pid:
            return
        with contextlib.suppress(DatabaseError):
            self._write_progress(time.monotonic(), ended=True)

    def _write_progress(self, now: float, ended: bool = False) -> bool:
        held = self._progress_held
        if held is None or (now - self._progress_at < PROGRESS_EVERY and not ended):
            return False
        self._progress_at, self._progress_held = now, None
        return self._worker.record_progress(self.id, held)

    def __repr__(self) -> str:
        return f"<job {self.id} {self.handler} attempt {self.attempts}>"


def run_attempt(row: JobRow, timeout: float, worker: LeaseHolder) -> Attempt:
    """Run the job's handler under the soft timeout; what the attempt came to, with the
    daemon's secrets masked in its error (masking.py: a handler may quote them)."""
    attempt = _run(row, timeout, worker)
    return attempt._replace(error=masking.masked(attempt.error)) if attempt.error else attempt


def _run(row: JobRow, timeout: float, worker: LeaseHolder) -> Attempt:
    if row.unreadable is not None:  # a raw INSERT's text in a number column (SQLite)
        return _dead(f"the row cannot be read: {row.unreadable}")
    registered = registry.get(row.handler)
    if registered is None:
        return _dead(
            f"unknown handler {row.handler!r}: no loaded module or [commands] table registered it"
        )
    try:
        payload = STRICT_JSON.decode(row.payload)
    except (ValueError, TypeError, RecursionError) as exc:
        return _dead(f"payload is not valid JSON: {exc}")
    context = JobContext(row, worker)
    try:
        arm_soft_timeout(timeout)  # soft_timeout's two halves: no generator per job
        try:
            value = registered.func(payload, context)
        finally:
            end_soft_timeout()
            exit_if_forked(worker.pid)
            context.end_progress()  # its last report, if the throttle held it back
    except JobTimeout as exc:  # a command's carries its stderr tail
        what = f"timed out after {timeout:g}s"
        # A failed attempt (retried or dead by fate.fate_of_attempt), counted as `timeout` (SPEC).
        return Attempt(
            Outcome.TIMEOUT, with_stderr(what, str(exc)) if str(exc) else what, None, False
        )
    except Retry as exc:
        return _failed(_retry_error(exc), exc.delay)
    except Snooze as exc:
        return snooze_outcome(exc.delay, text_of(exc.reason))
    except Fail as exc:
        return _dead(f"failed permanently: {text_of(exc)}")
    except Exception as exc:
        return _failed(_describe(exc))
    if guards.cancel_raised:  # `forkq work`: it caught the JobCancelled of a cancel
        return Attempt(Outcome.TIMEOUT, "cancelled (its handler caught JobCancelled)", None, False)
    return DONE if value is None else Returned.of(value)  # most return None: no allocation


def _no_constant(name: str) -> Any:
    """NaN and Infinity are no JSON (Python's parser takes them; PHP's json_decode does not)."""
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    """A number past what a float holds (1e999) would be read as Infinity: no JSON either."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is too large for a float")
    return value


# The payload's parser: as json.loads, less NaN and Infinity (a raw INSERT's), whether
# written as such or as a number no float holds.
STRICT_JSON = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def log_finished(
    log: Any, row: JobRow, attempt: Attempt, outcome: Outcome, duration: float
) -> None:
    """The one canonical line per finished attempt, with the outcome `fate_of_attempt` gave it."""
    if (  # most lines: written the quick way
        outcome is Outcome.DONE
        and not attempt.error
        and logs.done_line(
            log, events.JOB_FINISHED, row.id, row.handler, row.queue, row.attempts, duration
        )
    ):
        return
    calm = outcome in (Outcome.DONE, Outcome.SNOOZED)
    (log.info if calm else log.warning)(
        events.JOB_FINISHED,
        job_id=row.id,
        handler=row.handler,
        queue=row.queue,
        attempt=row.attempts,
        outcome=outcome,
        duration=round(duration, 4),
        **({"error": attempt.error.splitlines()[0][:300]} if attempt.error else {}),
        **({"delay": attempt.delay} if outcome is Outcome.SNOOZED else {}),
    )


def _failed(error: str, delay: float | None = None) -> Attempt:
    """A failure another attempt may mend, after `delay` if the handler asked for one."""
    return Attempt(Outcome.RETRY, error, delay, False)


def _dead(error: str) -> Attempt:
    """A failure no attempt can mend: dead whatever attempts are left."""
    return Attempt(Outcome.DEAD, error, None, True)


def _retry_error(exc: Retry) -> str:
    """`retry requested: REASON`; without a reason, the error it was raised from
    (`raise Retry(delay=60) from exc`), else nothing more."""
    reason = text_of(exc.reason)
    if reason != RETRY_REQUESTED:
        return f"{RETRY_REQUESTED}: {reason}"
    cause = exc.__cause__
    if cause is None:
        return RETRY_REQUESTED
    return f"{RETRY_REQUESTED}: {type(cause).__name__}: {text_of(cause)}"


def _describe(exc: BaseException) -> str:
    """`Type: message` and the innermost frames, for last_error; a command's failure is its
    exit status and stderr, where frames of the runner would only push its tail out."""
    if isinstance(exc, CommandFailed):
        return text_of(exc)
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)
    return f"{type(exc).__name__}: {text_of(exc)}\n" + "".join(frames[-4:])


def text_of(value: object) -> str:
    """str(value), or what it is when its __str__ raises: a handler's exception (or the
    reason it gave) that cannot say what it is still ends its attempt, never the worker."""
    try:
        return str(value)
    except Exception as exc:  # a hostile or broken __str__
        return f"<{type(value).__name__}: str() raised {type(exc).__name__}>"


def run_after_attempt(records: list[Callable[[], None]], log: Any) -> None:
    """What the handler left to run once it returned (JobContext.after_attempt); one that
    raises is logged and the next still runs."""
    while records:
        record = records.pop(0)
        try:
            record()
        except Exception as exc:
            log.warning(events.AFTER_ATTEMPT_FAILED, error=f"{type(exc).__name__}: {exc}"[:300])
