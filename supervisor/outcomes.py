"""The closed sets of what can become of an attempt and of a gone child's jobs.

Tests and metrics name these kinds, never substrings of messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, NamedTuple


class Outcome(StrEnum):
    """How one attempt ended (the `outcome` of `job_finished` and of the metrics)."""

    DONE = "done"
    RETRY = "retry"  # failed, attempts left: back after a backoff
    DEAD = "dead"  # failed for good: attempts exhausted, Fail, unknown handler, bad payload
    TIMEOUT = "timeout"  # killed past its timeout (the attempt counts; retried or dead)
    CANCELLED = "cancelled"
    SNOOZED = "snoozed"  # back later, no attempt used


class Attempt(NamedTuple):
    """What one run of a handler came to, before its fate is decided.

    DONE, SNOOZED, RETRY (failed: another attempt may mend it) or DEAD (failed for
    good). A RETRY is what the attempt asked for, not yet what happens: with its
    attempts used up the job ends DEAD (fate.py's `fate_of_attempt`). A NamedTuple: it unpacks,
    and equals the plain tuple the worker passed around before it had a type.
    """

    outcome: Outcome
    error: str  # the failure, or the snooze's reason; "" when done
    delay: float | None  # the snooze's, or the retry's the handler asked for
    permanent: bool  # dead whatever attempts are left (Fail, unknown handler, bad payload)


class Returned(Attempt):
    """A DONE attempt and what its handler returned (`value`, kept when the handler or its
    pool keeps results). Not a tuple field: a Returned still equals and unpacks as the
    four-tuple every other attempt is."""

    value: Any

    @classmethod
    def of(cls, value: Any) -> Returned:
        done = cls(Outcome.DONE, "", None, False)
        done.value = value
        return done


@dataclass(frozen=True)
class Fate:
    """What happens to a job after a failed attempt: policy.py computes it from numbers,
    fate.py from a job and its handler's settings."""

    dead: bool
    delay: float  # seconds before the next attempt (ignored when dead)
    error: str


class SnoozeWritten(StrEnum):
    """What became of a Snooze the store was asked to write."""

    SNOOZED = "snoozed"  # back to ready or scheduled, no attempt used
    DEAD = "dead"  # it had snoozed max_snoozes times: ended dead
    LOST = "lost"  # this owner no longer holds the job: nothing written
    SUPERSEDED = "superseded"  # another job took its unique key meanwhile: ended cancelled


def snoozed_too_often(max_snoozes: int, reason: str) -> str:
    """The last error of a job that snoozed once more than its handler's max_snoozes."""
    return (
        f"snoozed {max_snoozes} {'time' if max_snoozes == 1 else 'times'}, its handler's"
        " max_snoozes: ended dead so it cannot"
        f" wait forever (last: {reason})"
    )


class SettleKind(StrEnum):
    """Why the master settles what a gone child held."""

    TIMED_OUT = "timed_out"  # killed by the master past its job's timeout
    SHUTDOWN = "shutdown"  # killed at shutdown (past shutdown_timeout, or SIGQUIT)
    NOT_RETIRED = "not_retired"  # ignored SIGTERM when asked to retire, then killed
    DIED = "died"  # exited or was killed by something else (a segfault, the OOM killer)


@dataclass(frozen=True)
class SettleReason:
    """One reason with its message and whether the running job's attempt counts."""

    kind: SettleKind
    message: str

    @property
    def counts_attempt(self) -> bool:
        """A job killed for the operator's sake (shutdown, retiring) did nothing wrong."""
        return self.kind in (SettleKind.TIMED_OUT, SettleKind.DIED)
