"""Value objects read from the store. No I/O here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from supervisor.columns import as_text, not_text, whole
from supervisor.jobref import Enqueued as Enqueued  # it was defined here


class JobState(StrEnum):
    WAITING = "waiting"  # on a parent (depends_on): never claimed until every parent is done
    READY = "ready"
    SCHEDULED = "scheduled"  # due later than the promotion horizon: outside the claim's range
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"
    CANCELLING = "cancelling"  # cancelled while running: its host kills the child, then CANCELLED
    CANCELLED = "cancelled"  # never run again unless retried; last_error says who cancelled it


class CancelResult(StrEnum):
    """What `Store.cancel_jobs` did with one job, or why it could not cancel it."""

    CANCELLED = "cancelled"  # it was waiting, ready or scheduled: cancelled now
    CANCELLING = "cancelling"  # it was running: the host running it kills it within 2 s
    DONE = "done"  # refused: it finished (kept, or moved to the archive)
    DEAD = "dead"  # refused: retry or purge it instead
    ALREADY_CANCELLED = "already cancelled"
    NOT_FOUND = "no such job"

    @property
    def ok(self) -> bool:
        return self in (CancelResult.CANCELLED, CancelResult.CANCELLING)


def utc(value: Any) -> datetime | None:
    """A store time (naive UTC datetime from MySQL, epoch seconds: SQLite's, a claim's) as
    aware UTC. A time no datetime holds (another program's INSERT wrote 1e20, -1e20 or
    text into a SQLite REAL column) reads as the nearest one there is, or the epoch for
    text: a row is read, and its job run, whatever it holds."""
    if type(value) is float and -1e10 < value < 1e11:  # a claim's two a job: checked first
        return datetime.fromtimestamp(value, UTC)  # (positional UTC: a third cheaper)
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    try:
        return datetime.fromtimestamp(float(value), UTC)
    except (OverflowError, OSError, ValueError, TypeError):
        if isinstance(value, int | float) and not math.isnan(value):
            return (datetime.max if value > 0 else datetime.min).replace(tzinfo=UTC)
        return datetime.fromtimestamp(0, tz=UTC)


CLAIMED = "claimed"  # shown for a running row whose handler has not started (no started_at)


def _state(value: str, odd: list[str]) -> str:
    """The status column as a JobState; one no forkq writes (a raw INSERT's 'pending') as
    it is, with the reason in `odd`, so no reader fails on it (no claim takes it)."""
    try:
        return JobState(value)
    except ValueError:
        odd.append(f"status holds {value!r}, which is no status of forkq's")
        return str(value)


def shown_status(status: str, started_at: Any) -> str:
    """The status a person sees: a job a worker claimed behind another and has not started
    is `claimed`, never `running` (SPEC: running means a handler has started)."""
    return CLAIMED if status == JobState.RUNNING and started_at is None else status


@dataclass(frozen=True)
class JobRow:
    """One row of forkq_jobs as stored; the payload is still text."""

    id: int
    queue: str
    handler: str
    payload: str
    status: str  # a JobState, but for a raw INSERT's own word (then `unreadable` says so)
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int | None
    unique_key: str | None
    locked_by: str | None
    locked_until: datetime | None
    last_error: str | None
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    limit_key: str | None = None  # its bucket of a [limits.NAME] with per_key
    snoozes: int = 0  # Snooze requests so far (none of them an attempt)
    limit_wait: str = ""  # the limit bucket it is parked on while ready; "" when claimable
    group_key: str | None = None  # its tenant in a fair pool (None: the limit_key is)
    tags: str | None = None  # JSON list given at enqueue (schema 9); None: none
    progress: str | None = None  # JSON its handler last reported (schema 9); None: none
    batch_id: int | None = None  # the q.batch() it belongs to (schema 13); None: none
    # What a raw INSERT wrote that cannot be read as its column's type (SQLite takes text
    # in a number column): the worker ends such a job dead with this reason, and every
    # other reader (the master, the CLI) still reads the row. None for nearly every row.
    unreadable: str | None = None

    @classmethod
    def from_mapping(cls, row: dict[str, Any]) -> JobRow:
        odd: list[str] = []
        return cls(
            id=int(row["id"]),
            queue=row["queue"],
            handler=as_text(row["handler"]),
            payload=as_text(row["payload"]),
            status=_state(row["status"], odd),
            priority=whole(row, "priority", 0, odd),
            run_at=utc(row["run_at"]) or datetime.now(UTC),
            attempts=whole(row, "attempts", 0, odd),
            max_attempts=whole(row, "max_attempts", None, odd),
            unique_key=row["unique_key"],
            locked_by=row["locked_by"],
            locked_until=utc(row["locked_until"]),
            last_error=row["last_error"],
            enqueued_at=utc(row["enqueued_at"]) or datetime.now(UTC),
            started_at=utc(row["started_at"]),
            finished_at=utc(row["finished_at"]),
            # Columns of schema versions 5 and 7: absent from older rows and the archive.
            limit_key=row.get("limit_key"),
            snoozes=int(row.get("snoozes") or 0),
            limit_wait=str(row.get("limit_wait") or ""),
            group_key=row.get("group_key"),  # schema version 8
            tags=row.get("tags"),
            progress=row.get("progress"),
            batch_id=None if row.get("batch_id") is None else int(row["batch_id"]),
            unreadable="; ".join([*odd, *not_text(row)]) or None,
        )

    @property
    def shown_status(self) -> str:
        return shown_status(self.status, self.started_at)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in vars(self).items():
            out[key] = (
                value.isoformat()
                if isinstance(value, datetime)
                else str(value)
                if isinstance(value, JobState)
                else value
            )
        out["status"] = self.shown_status
        return out


@dataclass(frozen=True)
class JobListing:
    """A job as the dashboard shows it: whatever the row holds, never refused (the status as
    stored, even one a raw INSERT made up). In lists `payload` and `last_error` are their
    first characters; on a job's page, whole. `host` and `pid` come from the process row
    of the lease holder when the read joined it."""

    id: int
    queue: str
    handler: str
    status: str
    priority: int
    attempts: int
    max_attempts: int | None
    unique_key: str | None
    locked_by: str | None
    locked_until: datetime | None
    run_at: datetime | None
    enqueued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    last_error: str | None
    payload: str
    host: str | None = None
    pid: int | None = None
    archived: bool = False
    tags: str | None = None  # JSON text as stored (a job's page only)
    progress: str | None = None  # JSON {"percent", "message", "at"} its handler last reported
    batch_id: int | None = None  # the q.batch() it belongs to (a job's page links to it)
    deps: int = 0  # schema 14's flags: 2 = enqueued with parents (then cancelled: no retry)

    @property
    def retriable(self) -> bool:
        """What a retry runs again: an ended job, not archived, unless it was cancelled
        with parents it can no longer wait on (Store.not_retried says so)."""
        with_parents = bool(self.deps & 2)
        if self.archived or (self.status == JobState.CANCELLED and with_parents):
            return False
        return self.status in (JobState.DEAD, JobState.CANCELLED, JobState.DONE)

    @classmethod
    def from_mapping(cls, row: dict[str, Any], archived: bool = False) -> JobListing:
        return cls(
            id=int(row["id"]),
            queue=str(row["queue"]),
            handler=str(as_text(row["handler"])),
            status=shown_status(str(row["status"]), row["started_at"]),
            priority=int(row["priority"]),
            attempts=int(row["attempts"]),
            max_attempts=None if row["max_attempts"] is None else int(row["max_attempts"]),
            unique_key=row["unique_key"],
            locked_by=row["locked_by"],
            locked_until=utc(row["locked_until"]),
            run_at=utc(row["run_at"]),
            enqueued_at=utc(row["enqueued_at"]),
            started_at=utc(row["started_at"]),
            finished_at=utc(row["finished_at"]),
            last_error=row["last_error"],
            payload=str(as_text(row["payload"]) or ""),
            host=row.get("host"),
            pid=None if row.get("pid") is None else int(row["pid"]),
            archived=archived,
            tags=row.get("tags"),
            progress=row.get("progress"),
            batch_id=None if row.get("batch_id") is None else int(row["batch_id"]),
            deps=int(row.get("deps") or 0),
        )


@dataclass(frozen=True)
class Throughput:
    """Jobs one queue finished in one minute, over every host (forkq_throughput)."""

    minute: float  # epoch seconds, the start of the minute
    queue: str
    done: int
    failed: int


@dataclass(frozen=True)
class NewJob:
    """What `enqueue` inserts. `run_at` (absolute) wins over `delay` (seconds from now, DB clock)."""

    handler: str
    payload_json: str
    queue: str = "default"
    priority: int = 0
    delay: float = 0.0
    run_at: datetime | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    limit_key: str | None = None  # the bucket of a per_key limit (e.g. a tenant)
    group_key: str | None = None  # its tenant in a fair pool (None: the limit_key is)
    tags: tuple[str, ...] | None = None  # for the dashboard's tag:NAME search
    unique_for: int | None = None  # seconds: the window its unique_key holds (None: none)
    unique_while: str | None = None  # queued | active | kept (None: kept)
    on_conflict: str = "skip"  # skip | replace | debounce: what a conflict does
    debounce_max: float | None = None  # debounce: run_at at most this past the first enqueue
    batch_id: int | None = None  # the q.batch() it belongs to (schema 13)


@dataclass(frozen=True)
class BatchStatus:
    """Where a batch (q.batch()) stands. `done` counts jobs that ended done, deleted or
    archived ones too (the total less the rest); counted live while the batch is open,
    and as counted when it settled after. `fired`: {event: callback job id}."""

    id: int
    total: int
    pending: int
    done: int
    dead: int
    cancelled: int
    sealed: bool
    created_at: float
    settled_at: float | None
    callbacks: dict[str, str]
    fired: dict[str, int]
    payload: str

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class QueueStats:
    """One queue's figures. Counts stop at the cap the caller gave `Store.stats`, so that
    reading them costs the same at 10k rows and at 5M: a count named in `capped` reached
    the cap and is a lower bound (the queue holds more; shown as "10000+")."""

    queue: str
    ready: int = 0  # due now: ready with run_at <= now
    delayed: int = 0  # not due yet: scheduled, or ready with run_at in the future
    running: int = 0
    dead: int = 0
    done: int = 0  # kept (on_success = keep)
    waiting: int = 0  # on a parent (depends_on): never claimed until its parents are done
    cancelled: int = 0  # kept until the pool's retention purges them, as dead ones are
    oldest_ready_age: float = 0.0  # seconds the oldest due job has waited (exact, never capped)
    paused: bool = False
    capped: frozenset[str] = frozenset()  # names of the counts above that reached the cap

    def shown(self, count: str) -> str:
        """A count as text: "10000+" when it reached the cap."""
        value = getattr(self, count)
        return f"{value}+" if count in self.capped else str(value)

    def as_dict(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["capped"] = sorted(self.capped)
        return out


@dataclass(frozen=True)
class HandBack:
    """What the master takes from a child busy with a long job, to write in its stead."""

    successes: list[int]  # jobs it finished and had not acknowledged yet
    on_success: str  # their pool's on_success mode
    unstarted: list[int]  # jobs it claimed and will now never start
    running: int | None  # the job it runs, claimed behind another: its start to record
    running_for: float  # seconds that job has run


@dataclass(frozen=True)
class QueueTimes:
    """What the master's poll learns of one queue: seconds until each is due (None: none)."""

    ready_in: float | None  # the earliest ready job (<= 0: a child can claim now)
    scheduled_in: float | None  # the earliest scheduled job (promote it when near)
    last_ready_in: float | None  # the latest ready job (far ahead: a raw INSERT to demote)


@dataclass(frozen=True)
class ProcessRow:
    name: str
    host: str
    pid: int
    role: str
    pool: str | None
    master: str | None
    started_at: datetime
    heartbeat_at: datetime
    node: str | None = None  # proc.node_id() of its writer; None in rows of schema < 4
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = dict(vars(self))
        out["started_at"] = self.started_at.isoformat()
        out["heartbeat_at"] = self.heartbeat_at.isoformat()
        out.pop("extra")
        return out


@dataclass(frozen=True)
class LockRow:
    name: str
    owner: str | None
    acquired_at: datetime | None
    expires_at: datetime
