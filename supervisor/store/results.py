"""Kept results and the attempt history (schema 12): what a job returned, and how each of
its attempts that did not end in its success ended.

A result is written only for a job whose handler or pool says `keep_result`, just
before the batched acknowledgement that completes it (keep_results). An attempt row is written only when an
attempt ends other than in the job's success (a failure, a timeout, a worker's death, an
expired lease), on paths that already write one statement each: a first attempt that
succeeds is described by the job row itself (started_at, finished_at, attempts) and costs
nothing here. Each job keeps its last ATTEMPT_SLOTS attempts (the slot is the attempt
number modulo that), errors cut to ATTEMPT_ERROR_CHARS; an operator's retry, which numbers
attempts from 1 again, keeps the run before it too, below slot 0 (keep_earlier_run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from supervisor.models import JobRow
from supervisor.store.core import StoreCore, micros

ATTEMPTS_SCHEMA_VERSION = 12  # forkq_attempts exists from this version on
ATTEMPT_SLOTS = 20  # attempts kept per job
ATTEMPT_ERROR_CHARS = 2000


@dataclass(frozen=True)
class AttemptEnd:
    """One attempt that did not end in its job's success, as forkq_attempts keeps it."""

    job_id: int
    attempt: int
    queue: str
    outcome: str  # retry | dead | timeout | died | lease_expired | cancelled
    worker: str | None  # its lease owner, host:pid:token
    error: str
    started_at: float | None  # epoch seconds; None: its handler never started

    def params(self) -> dict[str, Any]:
        host, pid = owner_host_pid(self.worker)
        return {
            "id": self.job_id,
            "slot": self.attempt % ATTEMPT_SLOTS,
            "attempt": self.attempt,
            "queue": self.queue,
            "outcome": self.outcome,
            "worker": self.worker,
            "host": host,
            "pid": pid,
            "error": self.error[:ATTEMPT_ERROR_CHARS],
            "started_at": self.started_at,
        }


def attempt_end(
    row: JobRow, owner: str | None, outcome: str, error: str, started: float | None = None
) -> AttemptEnd:
    """An attempt's end as forkq_attempts keeps it; `started` (epoch seconds) when the
    caller knows it, else the row's started_at."""
    if started is None and row.started_at is not None:
        started = row.started_at.timestamp()
    return AttemptEnd(row.id, row.attempts, row.queue, outcome, owner, error, started)


def owner_host_pid(owner: str | None) -> tuple[str | None, int | None]:
    """The host and pid of a lease owner name (`host:pid:token`, proc.owner_name)."""
    parts = (owner or "").rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None, None
    return parts[0], int(parts[1])


class ResultOps(StoreCore):
    """Kept results (forkq_results, shared with the Django backend) and attempts."""

    def keep_results(self, kept: Sequence[tuple[int, str, str]]) -> None:
        """Write the return values (job id, queue, JSON text) of jobs about to be completed,
        in one transaction. Before the completion, so a done job always has its value; a
        job whose completion then finds its lease taken over runs again, and its next
        value replaces this one (the job row says running until then)."""

        def attempt() -> None:
            with self._tx():
                for job_id, queue, value in kept:
                    self._execute("keep_result", self._params(id=job_id, queue=queue, value=value))

        self._retrying(attempt)

    def too_large_to_keep(self, job_id: int, queue: str, value: str) -> str | None:
        """Why the database would refuse to keep this return value, or None: SQLite takes
        any up to a gigabyte; MySQL's max_allowed_packet is measured (mysql.py)."""
        return None

    def job_result(self, job_id: int) -> dict[str, Any] | None:
        """The job's kept result row (status, return_value, finished_at); None if none."""
        rows = self._rows("job_result", id=job_id)
        return rows[0] if rows else None

    def job_state(self, job_id: int) -> str | None:
        """The job's status (its archived row's once archived); None once it is gone."""
        rows = self._rows("job_state", id=job_id)
        return str(rows[0]["status"]) if rows else None

    def record_attempt(self, end: AttemptEnd) -> None:
        """Keep one attempt's end (nothing before schema 12)."""
        if self.has_attempts_table():
            self._run("record_attempt", **end.params())

    def keep_earlier_run(self, ids: Sequence[int]) -> None:
        """Before an operator's retry, whose run numbers its attempts from 1 again: the
        history of the run before moves out of the slots (attempt % 20) the new one will
        write, and a run older than that goes. So both stay listed, up to 20 each."""
        if not self.has_attempts_table():
            return
        params = self._params(ids=self._ids(ids))

        def attempt() -> None:
            with self._tx():
                self._execute("drop_older_runs", params)
                self._execute("shift_attempts", params)  # 20: ATTEMPT_SLOTS

        self._retrying(attempt)

    def job_attempts(self, job_id: int) -> list[dict[str, Any]]:
        """The job's recorded attempts, oldest first."""
        return self._rows("job_attempts", id=job_id) if self.has_attempts_table() else []

    def purge_attempts(self, older_than: float, queue: str) -> int:
        """Delete attempt rows of `queue` older than `older_than` seconds, in chunks."""
        if not self.has_attempts_table():
            return 0
        return self._in_chunks("purge_attempts", age_us=micros(older_than), queue=queue)

    def has_attempts_table(self) -> bool:
        return self.schema_at_least(ATTEMPTS_SCHEMA_VERSION)
