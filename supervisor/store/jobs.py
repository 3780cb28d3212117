"""The job lifecycle: what workers and the master do to jobs (claim, complete, fail,
snooze, release, extend leases, settle cancels and expired leases, promote and demote,
poll the queues).

Every state change of a claimed job repeats its precondition (`status = 'running'
AND locked_by = owner`) and returns how many rows it changed, so a worker whose
lease was taken over never overwrites the new holder.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields
from datetime import UTC, datetime
from typing import Any

from supervisor.columns import as_text, text_problem, whole
from supervisor.errors import SchemaError
from supervisor.models import HandBack, JobRow, JobState, QueueTimes, utc
from supervisor.outcomes import SnoozeWritten, snoozed_too_often
from supervisor.store.acks import AckOps
from supervisor.store.core import (
    AHEAD_US,
    LIMITS_SCHEMA_VERSION,
    PROMOTE_BATCH,
    SCHEDULE_AHEAD,
    micros,
)
from supervisor.store.results import ResultOps, attempt_end


class JobOps(AckOps, ResultOps):
    """Claiming and settling jobs (workers, the master, `forkq work`)."""

    # --- workers -------------------------------------------------------------------------

    def claim(self, queue: str, owner: str, limit: int, lease: float) -> list[JobRow]:
        """Take up to `limit` due jobs of `queue` under a lease, in priority / run_at / id order."""
        return self.complete_and_claim({}, queue, owner, limit, lease)[0]

    def complete_and_claim(
        self,
        done: Mapping[str, Sequence[int]],
        queue: str,
        owner: str,
        limit: int,
        lease: float,
    ) -> tuple[list[JobRow], int]:
        """Record the previous batch's successes and claim the next batch in one transaction.

        `done` is {on_success mode: ids}. One commit (one fsync, one SQLite write lock)
        per batch instead of two. Returns the claimed jobs and how many successes were
        recorded (fewer than given: leases were taken over).
        """

        def attempt() -> tuple[list[JobRow], int]:
            with self._tx():
                claim = self._params(queue=queue, limit=limit)
                completed, rows = self.complete_and_select(owner, done, claim)
                if rows:
                    ids = [row["id"] for row in rows]
                    params = self._params(
                        owner=owner, ids=self._ids(ids), first=ids[0], lease_us=micros(lease)
                    )
                    self._execute_last("claim_update", params)  # its COMMIT with it
            return [claimed_job(row, queue, owner) for row in rows], completed

        return self._retrying(attempt)

    def extend_leases(self, owner: str, ids: Sequence[int], lease: float) -> int:
        if not ids:
            return 0
        return self._run("extend_leases", owner=owner, ids=self._ids(ids), lease_us=micros(lease))

    def fail(
        self,
        owner: str,
        job_id: int,
        error: str,
        *,
        dead: bool,
        delay: float = 0.0,
        max_attempts: int | None = None,
        only_expired: bool = False,
        unique: bool = False,
    ) -> bool:
        """Record a failed attempt: back to ready after `delay` (bounded_wait), or dead.
        False if no longer held. `unique`: the job has a unique key, so a retry the
        database ignored (the key taken meanwhile) ends it superseded (superseding.py)."""
        in_batch = self.batch_members is not None and job_id in self.batch_members
        if dead and self.has_deps_schema():  # a parent's children are settled with it
            ended = self.fail_dead(owner, job_id, error, max_attempts, only_expired)
            if ended and in_batch:  # its batch just after (the chores catch a crash between)
                self._retrying(lambda: self._settle_batch_alone(job_id))
            return ended
        name = "fail_dead" if dead else "fail_retry"
        delay = self.bounded_wait(delay)
        values = dict(
            status=JobState.SCHEDULED if delay > SCHEDULE_AHEAD else JobState.READY,
            owner=owner,
            id=job_id,
            error=error,
            delay_us=micros(delay),
            max_attempts=max_attempts,
            only_expired=1 if only_expired else 0,
        )
        if dead and in_batch:
            return self._retrying(lambda: self._end_batch_job(name, values, job_id)) == 1
        changed = self._run(name, **values)
        if unique and not dead:
            gone, left = self.supersede_held(owner, [job_id], only_expired=only_expired)
            return gone == 1 or (changed == 1 and left == 0)
        return changed == 1

    def _settle_batch_alone(self, job_id: int) -> None:
        with self._tx():
            self.settle_batches_of([job_id])

    def _end_batch_job(self, name: str, values: dict[str, Any], job_id: int) -> int:
        """A batch job ending dead: the batch hook in the same transaction (batches.py)."""
        with self._tx():
            changed = self._execute(name, self._params(**values))
            self.settle_batches_of([job_id])
            return changed

    def snooze(
        self,
        owner: str,
        job_id: int,
        delay: float,
        max_snoozes: int,
        reason: str = "snoozed",
        unique: bool = False,
    ) -> SnoozeWritten:
        """The handler raised Snooze(delay): back to ready (or scheduled) after `delay`, the
        claim's attempt given back and the snooze counted. SNOOZED; DEAD when the job had
        already snoozed `max_snoozes` times (so a bug cannot snooze forever unseen); LOST
        when this owner no longer holds it; SUPERSEDED (`unique`) when another job took its
        unique key meanwhile (superseding.py). Needs schema 7 (snoozes_counted). The wait
        is bounded as fail's is (bounded_wait)."""
        delay = self.bounded_wait(delay)
        changed = self._run(
            "snooze",
            status=JobState.SCHEDULED if delay > SCHEDULE_AHEAD else JobState.READY,
            owner=owner,
            id=job_id,
            delay_us=micros(delay),
            max_snoozes=max_snoozes,
        )
        if unique:
            ended, left = self.supersede_held(owner, [job_id], max_snoozes=max_snoozes)
            if ended or left:
                return SnoozeWritten.SUPERSEDED if ended else SnoozeWritten.LOST
        if changed == 1:
            return SnoozeWritten.SNOOZED
        ended = self.fail(owner, job_id, snoozed_too_often(max_snoozes, reason), dead=True)
        return SnoozeWritten.DEAD if ended else SnoozeWritten.LOST

    def snoozes_counted(self) -> bool:
        """Whether the schema counts snoozes (version 7): before it a Snooze is a retry."""
        return self.has_limits_schema()

    def has_limits_schema(self) -> bool:
        return self.schema_at_least(LIMITS_SCHEMA_VERSION)

    def require_limits_schema(self) -> None:
        """[limits] are kept only on schema 7: never claim a limited job without them."""
        if not self.has_limits_schema():
            raise SchemaError(
                f"[limits] need schema version {LIMITS_SCHEMA_VERSION}: run `forkq schema apply`"
            )

    def hand_back(self, owner: str, taken: HandBack) -> int:
        """The master's hand-back for a child busy with a long job (daemon/handback.py), in one
        transaction: write the successes it had not written yet, return the jobs it claimed
        and has not started to ready (no attempt counted, so an idle worker takes them), and
        mark the start of the job it runs if the claim did not. Returns the jobs returned."""

        def attempt() -> int:
            with self._tx():
                if taken.successes:
                    self.note_batch_members(taken.successes)
                    self.complete_in_transaction(owner, taken.successes, taken.on_success)
                returned = 0
                if taken.unstarted:
                    held = {"owner": owner, "ids": self._ids(taken.unstarted), "only_expired": 0}
                    returned = self._execute("release", self._params(uncount=1, **held))
                    # A row the release left held (its unique key taken meanwhile: IGNORE)
                    # yields to the key's holder (superseding.py).
                    kept = sum(self.supersede_in_transaction(owner, taken.unstarted))
                    returned -= kept if self.counts_matched else 0  # MySQL counted them
                if taken.running is not None:
                    self._execute(
                        "mark_started",
                        self._params(
                            owner=owner, id=taken.running, ago_us=micros(taken.running_for)
                        ),
                    )
                return returned

        return self._retrying(attempt)

    def held_by(self, owner: str) -> list[JobRow]:
        return [JobRow.from_mapping(r) for r in self._rows("held_by", owner=owner)]

    def cancelling_jobs(self, limit: int = 1000) -> list[tuple[int, str]]:
        """(job id, holder) of every job asked to cancel while it ran."""
        return [
            (int(r["id"]), str(r["locked_by"])) for r in self._rows("cancelling_jobs", limit=limit)
        ]

    def finish_cancel(self, job_id: int) -> bool:
        """A cancelling job whose holder is gone ends cancelled; False if it was not cancelling.
        An attempt whose handler had started goes into its history as `cancelled`, and its
        waiting children are settled, in the same transaction (schemas 12 and 14)."""
        deps, history = self.has_deps_schema(), self.has_attempts_table()

        def attempt() -> bool:
            with self._tx():
                held = self._fetchall("finish_cancel_select", self._params(id=job_id))
                if self._execute("finish_cancel", self._params(id=job_id)) != 1:
                    return False
                row = JobRow.from_mapping(held[0]) if held else None
                if history and row is not None and row.started_at is not None:
                    end = attempt_end(row, row.locked_by, "cancelled", row.last_error or "")
                    self._execute("record_attempt", self._params(**end.params()))
                if deps:
                    self.settle_children([job_id], ended=JobState.CANCELLED)
                    self.forget_parents([job_id])
                return True

        return self._retrying(attempt)

    def expired_leases(self, limit: int = 500) -> list[JobRow]:
        """Running and cancelling rows whose lease ran out, or that have none (raw rows)."""
        return [JobRow.from_mapping(r) for r in self._rows("expired_leases", limit=limit)]

    def bury_unleased(self, job_id: int) -> bool:
        """End `dead`, with the reason, a running row without a lease (a raw INSERT's)."""
        return bool(self._run("unleased_bury", id=job_id, error=UNLEASED))

    def poll(self, queues: Sequence[str]) -> dict[str, QueueTimes]:
        """One query, three index dives per queue: when its ready and scheduled jobs fall due."""
        if not queues:
            return {}
        rows = self._rows("due_queues", queues=json.dumps(list(queues)))
        return {
            r["queue"]: QueueTimes(
                _seconds(r["wait_us"]), _seconds(r["scheduled_us"]), _seconds(r["last_us"])
            )
            for r in rows
        }

    def promote(self, queue: str, limit: int = PROMOTE_BATCH) -> int:
        """Make up to `limit` scheduled jobs due within SCHEDULE_AHEAD ready; how many."""
        return self._move("promote", queue, limit)

    def demote(self, queue: str, limit: int = PROMOTE_BATCH) -> int:
        """Move up to `limit` ready jobs due after SCHEDULE_AHEAD to scheduled; how many."""
        return self._move("demote", queue, limit)

    def _move(self, kind: str, queue: str, limit: int) -> int:
        def attempt() -> int:
            with self._tx():
                params = self._params(queue=queue, limit=limit, ahead_us=AHEAD_US)
                ids = [row["id"] for row in self._fetchall(f"{kind}_select", params)]
                if not ids:
                    return 0
                return self._execute(f"{kind}_update", self._params(ids=self._ids(ids)))

        return self._retrying(attempt)

    def bury_untimed(self, queue: str, limit: int = PROMOTE_BATCH) -> int:
        """End `dead`, with the reason, the jobs of `queue` whose run_at is no time, which
        never fall due (SQLite: the text a raw INSERT wrote); how many."""

        def attempt() -> int:
            with self._tx():
                rows = self._fetchall("untimed_select", self._params(queue=queue, limit=limit))
                if not rows:
                    return 0
                ids = self._ids([row["id"] for row in rows])
                return self._execute("untimed_bury", self._params(ids=ids, error=UNTIMED))

        return self._retrying(attempt)

    def count_ready(self, queue: str, cap: int = 10_000) -> int:
        return int(self._rows("count_ready", queue=queue, cap=cap)[0]["n"])


UNTIMED = (
    "run_at is not a number of seconds (SQLite keeps times as epoch seconds, REAL): a raw"
    " INSERT wrote text there, or milliseconds (past the year 3000), so the job could never"
    " fall due; enqueue it again with run_at in epoch seconds"
)


UNLEASED = (
    "status 'running' with no lease (locked_until NULL): no worker held it, so it would never"
    " run nor end; a producer leaves status to its default, 'ready' (`forkq retry` runs it)"
)


def claimed_job(row: dict[str, Any], queue: str, owner: str) -> JobRow:
    """The row as it is after claim_update, without reading it back.

    claim_select reads only the columns a worker uses; the lease and time columns it
    does not read are None here. Built without the frozen dataclass's __init__ (one
    object.__setattr__ per field, a few microseconds a job): a copy of every field's
    default, the row's values set in it, goes into the instance's dict at once.
    """
    priority, attempts, most = row["priority"], row["attempts"], row["max_attempts"]
    payload, handler = row["payload"], row["handler"]
    odd: list[str] = []  # a raw INSERT's text in a number column, bytes no UTF-8: dead
    if (
        type(priority) is not int
        or type(attempts) is not int
        or not (most is None or type(most) is int)
        or not (type(payload) is str and payload.isascii())
        or not (type(handler) is str and handler.isascii())
    ):
        priority, most = whole(row, "priority", 0, odd), whole(row, "max_attempts", None, odd)
        attempts = whole(row, "attempts", 0, odd)
        payload, handler = as_text(payload), as_text(handler)  # a BLOB: its text
        odd += filter(None, (text_problem("payload", payload), text_problem("handler", handler)))
    values = _CLAIMED_DEFAULTS.copy()  # (item by item: a third cheaper than keywords)
    values["id"], values["queue"], values["handler"] = int(row["id"]), queue, handler
    values["payload"], values["priority"], values["attempts"] = payload, priority, attempts + 1
    values["max_attempts"], values["unique_key"] = most, row["unique_key"]
    values["run_at"] = utc(row["run_at_s"]) or datetime.now(UTC)  # whatever the row holds
    values["enqueued_at"] = utc(row["enqueued_at_s"]) or datetime.now(UTC)
    values["locked_by"], values["limit_key"] = owner, row.get("limit_key")  # (limits' claims)
    values["batch_id"] = row.get("batch_id")  # None for a job in no batch
    values["unreadable"] = "; ".join(odd) or None
    job = object.__new__(JobRow)
    job.__dict__.update(values)
    return job


# Every field's default, and what a claimed row holds where claim_select reads nothing.
_CLAIMED_DEFAULTS: dict[str, Any] = {
    **{f.name: f.default for f in fields(JobRow) if f.default is not MISSING},
    "status": JobState.RUNNING,
    "locked_until": None,
    "last_error": None,
    "started_at": None,
    "finished_at": None,
}


def _seconds(us: Any) -> float | None:
    return None if us is None else int(us) / 1e6
