"""A failed attempt's fate by its handler's settings: retried with the handler's backoff
while attempts are left, else dead. Shared by the worker (a handler that failed) and the
cluster chores (a job whose holder is gone); the arithmetic is policy.py's.
"""

from __future__ import annotations

from supervisor import registry
from supervisor.models import JobRow
from supervisor.outcomes import Attempt, Fate, Outcome
from supervisor.policy import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_MAX_ATTEMPTS,
    failure_fate,
)


def max_attempts_for(row: JobRow) -> int:
    registered = registry.get(row.handler)
    return row.max_attempts or (registered.max_attempts if registered else DEFAULT_MAX_ATTEMPTS)


def failure_fate_for(row: JobRow, error: str, requested_delay: float | None = None) -> Fate:
    """After a failed attempt: retry with the handler's backoff while attempts are left, else dead."""
    registered = registry.get(row.handler)
    return failure_fate(
        row.attempts,
        max_attempts_for(row),
        error,
        requested_delay=requested_delay,
        base=registered.backoff_base if registered else DEFAULT_BACKOFF_BASE,
        cap=registered.backoff_cap if registered else DEFAULT_BACKOFF_CAP,
    )


def fate_of_attempt(row: JobRow, attempt: Attempt) -> tuple[Outcome, Fate | None]:
    """What became of the job after `attempt`, and for a failure the fate to write.

    A failure that asked for a retry (RETRY) on the job's last attempt ends DEAD: the
    outcome logged and counted says what happens to the job, not what the attempt asked.
    An attempt that ran past its timeout stays TIMEOUT (SPEC: every such attempt is
    counted `timeout`), its fate a failure's: retried while attempts are left, else dead.
    """
    if attempt.outcome in (Outcome.DONE, Outcome.SNOOZED):
        return attempt.outcome, None
    if attempt.permanent:
        return Outcome.DEAD, Fate(dead=True, delay=0.0, error=attempt.error)
    fate = failure_fate_for(row, attempt.error, attempt.delay)
    if attempt.outcome is Outcome.TIMEOUT:
        return Outcome.TIMEOUT, fate
    return (Outcome.DEAD if fate.dead else Outcome.RETRY), fate
