"""Outcomes waiting to be written, and their writing: the worker's half of at least once.

Successes are acknowledged in batches (in the next claim's transaction, or sooner when
the buffer is old): if the process dies before the ack, those jobs run again — at least
once, never lost. Failures and snoozes are written at once. Anything waiting to be
written survives a lost connection (the store raises, the record stays pending) and is
written after the reconnect. Every write names the lease owner: a job whose lease was
taken over is not overwritten, only logged as `lease_lost` (a job cancelled while it ran
is the master's to end and log, `job_cancelled`). A failure or snooze the store
refuses for any other reason (what the handler gave could not be written) ends the job
dead with that reason: the worker goes on, and so does its pool (`outcome_unwritable`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from supervisor import events, registry
from supervisor.errors import ConnectionLost, TransientDatabaseError
from supervisor.fate import failure_fate_for, max_attempts_for
from supervisor.models import JobRow, JobState
from supervisor.outcomes import Fate, Outcome, SnoozeWritten, snoozed_too_often
from supervisor.policy import DEFAULT_MAX_SNOOZES, truncate_error
from supervisor.store import Store
from supervisor.store.results import AttemptEnd, attempt_end
from supervisor.work.attempt import text_of
from supervisor.work.keeping import Keeper


@dataclass(frozen=True)
class Failure:
    """A failed attempt's fate, as store.fail writes it."""

    job_id: int
    error: str  # cut to what last_error holds
    dead: bool
    delay: float
    max_attempts: int
    end: AttemptEnd | None = None  # the attempt, for its history (store/results.py)
    unique: bool = False  # it has a unique key (a retry may find it taken: store.fail)


@dataclass(frozen=True)
class Kept:
    """A success whose return value is kept: the value is written just before the batched
    acknowledgement that completes the job (until then the job row still says running)."""

    job_id: int
    mode: str
    queue: str
    value: str  # JSON text


@dataclass(frozen=True)
class Snoozed:
    """A snoozed attempt, as store.snooze writes it (schema 7)."""

    job_id: int
    delay: float
    max_snoozes: int
    reason: str
    unique: bool = False  # it has a unique key (store.snooze)
    end: AttemptEnd | None = None  # its attempt, as the history keeps it if it ends dead


@dataclass
class Pending:
    """Outcomes waiting to be written: successes by on_success mode, and failures."""

    successes: dict[str, list[int]] = field(default_factory=dict)
    failures: list[Failure | Snoozed] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)  # values to write before their successes
    oldest: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.failures) or bool(self.kept) or any(self.successes.values())


class Outbox:
    """One worker's pending outcomes and the store calls that write them."""

    def __init__(
        self,
        store: Store,
        owner: str,
        log: Any,
        written_elsewhere: Callable[[], list[int]] = list,
        keeper: Keeper | None = None,
    ) -> None:
        self.store = store
        self.keeper = keeper
        self.waking: list[int] = []  # kept jobs whose waiters hear of them once acknowledged
        self.owner = owner
        self.log = log
        self.pending = Pending()
        # Outcomes the store turned into others: cancelled meanwhile, snoozed too often (dead).
        self.rewritten: dict[int, Outcome] = {}
        self.ends_cancels = False  # no master does (`forkq work`): end them cancelled here
        # Successes the master acknowledged for us while we ran a long job (a daemon
        # child's ledger): asked before each write of ours, and forgotten.
        self.written_elsewhere = written_elsewhere

    def forget_written_elsewhere(self) -> None:
        """Drop successes someone else wrote; from now on only we write the rest."""
        written = set(self.written_elsewhere())
        if not written:
            return
        for mode, ids in list(self.pending.successes.items()):
            self.pending.successes[mode] = [i for i in ids if i not in written]
        if not any(self.pending.successes.values()):
            self.pending.oldest = 0.0

    # --- queueing ------------------------------------------------------------------------

    def success(self, job_id: int, mode: str) -> None:
        """A success, written with the next claim (or by `flush` once it is old)."""
        self.pending.successes.setdefault(mode, []).append(job_id)
        self.pending.oldest = self.pending.oldest or time.monotonic()

    def failure(self, row: JobRow, fate: Fate, ended: str = "", started: float = 0.0) -> None:
        """A failed attempt's fate, as fate.py's `fate_of_attempt` gave it; with `ended` (its
        outcome) and `started` (its wall-clock start), into the job's attempt history."""
        error = truncate_error(fate.error)
        end = attempt_end(row, self.owner, ended, fate.error, started) if ended else None
        self.pending.failures.append(
            Failure(
                row.id,
                error,
                fate.dead,
                fate.delay,
                max_attempts_for(row),
                end,
                row.unique_key is not None,
            )
        )
        self.flush()  # failures are written at once

    def kept(self, row: JobRow, mode: str, value: str) -> None:
        """A success whose return value is kept: the value goes in one transaction with the
        other kept values of the batch, then the success is acknowledged as any other
        (never by the master in the child's stead: it would not write the value)."""
        self.pending.kept.append(Kept(row.id, mode, row.queue, value))
        self.success(row.id, mode)

    def write_kept(self) -> None:
        """Write the kept values waiting for their acknowledgement (before it, always)."""
        if self.pending.kept:
            kept = self.pending.kept
            self.store.keep_results([(k.job_id, k.queue, k.value) for k in kept])
            self.pending.kept = []
            self.waking.extend(k.job_id for k in kept)

    def snooze(self, row: JobRow, reason: str, delay: float, started: float) -> None:
        """Back after `delay` without using an attempt (schema 7 counts it; before it, a
        snooze is a retry, so attempts still bound it). `started`: its wall-clock start."""
        if not self.store.snoozes_counted():
            error = f"snoozed ({reason}); schema 7 counts snoozes"
            self.failure(row, failure_fate_for(row, error, delay))
            return
        registered = registry.get(row.handler)
        most = registered.max_snoozes if registered else DEFAULT_MAX_SNOOZES
        reason = truncate_error(reason, 1000)
        end = attempt_end(row, self.owner, "dead", reason, started)
        self.pending.failures.append(
            Snoozed(row.id, delay, most, reason, row.unique_key is not None, end)
        )
        self.flush()  # written at once, as failures are

    # --- writing -------------------------------------------------------------------------

    def flush(self) -> None:
        """Write pending outcomes; on a lost connection they stay pending for the next try."""
        self.forget_written_elsewhere()
        self.write_kept()
        for mode, ids in list(self.pending.successes.items()):
            if ids:
                self.acknowledged({mode: ids}, self.store.complete(self.owner, ids, mode))
        self.flush_failures()

    def acknowledged(self, done: dict[str, list[int]], written: int) -> None:
        """Forget successes once written; fewer rows than ids means leases were taken over."""
        expected = sum(len(ids) for ids in done.values())
        if written < expected:
            self.log.warning(
                events.LEASE_LOST, jobs=expected - written, note="another worker holds them now"
            )
        for mode in list(done):
            self.pending.successes.pop(mode, None)
        if not any(self.pending.successes.values()):
            self.pending.oldest = 0.0
        if self.waking and self.keeper is not None:  # written: same-host waiters may read
            for job_id in self.waking:
                self.keeper.wake(job_id)
        self.waking = []

    def flush_failures(self) -> None:
        while self.pending.failures:
            failure = self.pending.failures[0]
            try:
                self._write(failure)
            except (ConnectionLost, TransientDatabaseError):
                raise  # it stays pending: written after the reconnect
            except Exception as exc:  # the store refused what the handler gave
                self._end_unwritable(failure.job_id, exc)
            self.pending.failures.pop(0)

    def _write(self, failure: Failure | Snoozed) -> None:
        if isinstance(failure, Snoozed):
            self._write_snooze(failure)
        elif not self.store.fail(
            self.owner,
            failure.job_id,
            failure.error,
            dead=failure.dead,
            delay=failure.delay,
            max_attempts=failure.max_attempts,
            unique=failure.unique,
        ):
            self._lost(failure.job_id)
        else:
            self._recorded(failure)

    def written_as(self, job_id: int) -> Outcome | None:
        """What the job's end came to when the store made it other than the worker asked
        (CANCELLED, DEAD), once; None nearly always."""
        return self.rewritten.pop(job_id, None) if self.rewritten else None

    def _lost(self, job_id: int) -> None:
        """Our outcome did not take. A cancel's kill (a command program SIGTERMed with its
        group; `forkq work`'s JobCancelled) is the usual reason, and no loss: the master,
        or here with no master, ends the job cancelled. One keyed read, on a rare path."""
        row = self.store.get_job(job_id)
        if row is not None and row.status in (JobState.CANCELLING, JobState.CANCELLED):
            self.rewritten[job_id] = Outcome.CANCELLED
            if self.ends_cancels and self.store.finish_cancel(job_id):
                self.log.warning(events.JOB_CANCELLED, job_id=job_id)
        else:
            self.log.warning(events.LEASE_LOST, job_id=job_id)

    def _recorded(self, failure: Failure) -> None:
        """The failed attempt into the job's history (best effort: the job's fate is
        written), and same-host waiters of a job that ended dead woken."""
        if failure.end is not None:
            self._record_end(failure.job_id, failure.end)
        if failure.dead and self.keeper is not None:
            self.keeper.wake(failure.job_id)

    def _record_end(self, job_id: int, end: AttemptEnd) -> None:
        try:
            self.store.record_attempt(end)
        except (ConnectionLost, TransientDatabaseError):
            pass  # the fate is written; only this line of the history is missing
        except Exception as exc:
            self.log.warning(events.ATTEMPT_NOT_RECORDED, job_id=job_id, error=str(exc))

    def _end_unwritable(self, job_id: int, exc: Exception) -> None:
        """A failure or snooze the store refused: the job ends dead with the reason. If even
        that is refused, its lease runs out and the reaper counts the attempt."""
        error = truncate_error(
            f"its outcome could not be written ({type(exc).__name__}: {text_of(exc)}): ended dead"
        )
        self.log.error(events.OUTCOME_UNWRITABLE, job_id=job_id, error=error)
        try:
            self.store.fail(self.owner, job_id, error, dead=True)
        except (ConnectionLost, TransientDatabaseError):
            raise
        except Exception as again:
            self.log.error(events.OUTCOME_UNWRITABLE, job_id=job_id, error=repr(again)[:1000])

    def _write_snooze(self, snooze: Snoozed) -> None:
        result = self.store.snooze(
            self.owner,
            snooze.job_id,
            snooze.delay,
            snooze.max_snoozes,
            snooze.reason,
            snooze.unique,
        )
        if result is SnoozeWritten.LOST:
            self._lost(snooze.job_id)
        elif result is SnoozeWritten.SUPERSEDED:  # its unique key was taken: ended cancelled
            self.log.info(events.JOB_SUPERSEDED, job_id=snooze.job_id)
        elif result is SnoozeWritten.DEAD:  # snoozed past its max_snoozes: the store ended it dead
            self.rewritten[snooze.job_id] = Outcome.DEAD
            self.log.warning(
                events.JOB_SNOOZED_TOO_OFTEN, job_id=snooze.job_id, max_snoozes=snooze.max_snoozes
            )
            if snooze.end is not None:  # its last attempt in the history, as a failure's
                error = snoozed_too_often(snooze.max_snoozes, snooze.reason)
                self._record_end(snooze.job_id, replace(snooze.end, error=error))
