"""The producer API: `Queue(url).enqueue(...)`, batches, transactional enqueue, and locks."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from supervisor import registry
from supervisor.dburl import DatabaseURL
from supervisor.errors import UsageError
from supervisor.lock import Lock
from supervisor.models import Enqueued, JobRow, NewJob
from supervisor.store import Store, open_store
from supervisor.store.limits.buckets import bucket_key_ok
from supervisor.unique import UNIQUE_KEYS, with_unique
from supervisor.wake import Nudger
from supervisor.workflow import Group, JobSpec, as_spec, checked_parents

# One encoder for every payload: json.dumps with options builds a new one per call.
_PAYLOAD_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)

ENQUEUE_KEYS = frozenset(
    {
        "handler",
        "payload",
        "queue",
        "delay",
        "run_at",
        "priority",
        "unique_key",
        "max_attempts",
        "limit_key",
        "group_key",
        "tags",
    }
) | UNIQUE_KEYS


class Queue:
    """A handle on the queue tables of one database. Cheap; opens its connection lazily."""

    def __init__(
        self,
        url: str | DatabaseURL | Sequence[str] | None = None,
        *,
        store: Store | None = None,
        wake: bool = True,
    ) -> None:
        """`url`: one database URL, or a Galera cluster's nodes as a list of them (in
        order of preference: the first Synced node that answers takes the writes).
        `wake=False` (or FORKQ_WAKE=0): no datagram to local daemons (see wake.py)."""
        if store is None:
            if url is None:
                raise UsageError("Queue needs a database URL")
            store = open_store(url)
        self.store = store
        self.nudger = Nudger.for_store(store) if wake else None

    def enqueue(
        self,
        handler: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        delay: float = 0.0,
        run_at: datetime | None = None,
        priority: int = 0,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        limit_key: str | None = None,
        group_key: str | None = None,
        connection: Any = None,
        tags: Sequence[str] | None = None,
        unique_for: int | None = None,
        unique_while: str | None = None,
        on_conflict: str = "skip",
        debounce_max: float | None = None,
        depends_on: Sequence[int] | None = None,
        on_parent_failure: str = "cancel",
    ) -> Enqueued:
        """Add one job and return its id (the existing job's id when `unique_key` is taken).

        The id is an `Enqueued` (an int): `conflicted` says the key was held, `existing`
        by which job. `unique_for` (seconds: a window), `unique_while` (queued, active,
        kept) and `on_conflict` (skip, replace, debounce with `debounce_max`): README
        "Unique jobs".

        With `connection` (a PyMySQL or sqlite3 connection of the caller's), the row is
        written inside the caller's open transaction: it exists iff the caller commits
        (local daemons are nudged before: the poll finds it within `poll_interval`).

        `limit_key` names the job's bucket in a `[limits.NAME]` with `per_key` (a tenant,
        an account): see SPEC "Flow control". `group_key` names its tenant in a fair
        pool (`[pools.X] fair = true`); without one its limit_key is its tenant. `tags` (up
        to 20 names of 1 to 64 characters) are for the dashboard's `tag:NAME` search;
        with `depends_on` (job ids) it waits until they are done (`_enqueue_waiting`).
        """
        job = build_job(handler, payload, queue, delay, run_at, priority, unique_key, max_attempts,
                        limit_key, group_key)  # fmt: skip
        job = with_unique(with_tags(job, tags), unique_for, unique_while, on_conflict, debounce_max)
        if depends_on is not None:
            return Enqueued(self._enqueue_waiting(job, depends_on, on_parent_failure, connection))
        on = connection
        job_id = self.store.enqueue(job) if on is None else self.store.insert_on(on, job)
        if self.nudger is not None:
            self.nudger.nudge_jobs((job,))
        return job_id

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
        """Add many jobs in one transaction (one round trip per 1,000 rows on MariaDB)."""
        built = []
        for spec in jobs:
            unknown = set(spec) - ENQUEUE_KEYS
            if unknown:
                raise UsageError(f"enqueue_many: unknown keys {sorted(unknown)}")
            if "handler" not in spec:
                raise UsageError("enqueue_many: every job needs a 'handler'")
            built.append(
                build_job(
                    spec["handler"],
                    spec.get("payload"),
                    spec.get("queue"),
                    spec.get("delay", 0.0),
                    spec.get("run_at"),
                    spec.get("priority", 0),
                    spec.get("unique_key"),
                    spec.get("max_attempts"),
                    spec.get("limit_key"),
                    spec.get("group_key"),
                )
            )
            built[-1] = with_unique(
                with_tags(built[-1], spec.get("tags")),
                spec.get("unique_for"),
                spec.get("unique_while"),
                spec.get("on_conflict", "skip"),
                spec.get("debounce_max"),
            )
        ids = self.store.insert_many(built)
        if self.nudger is not None:
            self.nudger.nudge_jobs(built)
        return ids

    def _enqueue_waiting(
        self, job: NewJob, depends_on: Any, on_parent_failure: str, connection: Any
    ) -> int:
        """The job waits (status `waiting`) until every parent is done; one ending dead or
        cancelled cancels it, unless `on_parent_failure` is "continue" (then that parent
        counts as done). See SPEC "Composing jobs"."""
        parents = checked_parents(depends_on, on_parent_failure)
        if job.unique_key is not None:
            raise UsageError("depends_on does not combine with unique_key (not yet)")
        if connection is not None:
            raise UsageError("depends_on does not combine with connection= (not yet)")
        job_id = self.store.enqueue_dependent(job, parents, on_parent_failure)
        if self.nudger is not None:
            self.nudger.nudge_jobs((job,))
        return job_id

    @staticmethod
    def job(handler: str, payload: Any = None, **options: Any) -> JobSpec:
        """A job for chain() and group(): enqueue's arguments, nothing written yet."""
        return JobSpec(handler, payload, options)

    def chain(self, specs: Sequence[JobSpec | Mapping[str, Any]]) -> list[int]:
        """Enqueue jobs that run one after another, in one transaction: each waits on the
        one before it (and on its own depends_on). Their ids, in order."""
        return self.enqueue_specs([as_spec(s) for s in specs], chained=True)

    def group(self, specs: Sequence[JobSpec | Mapping[str, Any]]) -> Group:
        """Enqueue jobs together, in one transaction; `.then(spec)` on what this returns
        enqueues a job that waits on all of them."""
        return Group(self, self.enqueue_specs([as_spec(s) for s in specs], chained=False))

    def enqueue_specs(self, specs: Sequence[JobSpec], chained: bool) -> list[int]:
        """Specs in one transaction; with `chained` each waits on the one before it."""
        built = []
        for spec in specs:
            options = dict(spec.options)
            parents = checked_parents(
                options.pop("depends_on", None), options.get("on_parent_failure", "cancel")
            )
            on_failure = options.pop("on_parent_failure", "cancel")
            unknown = set(options) - ENQUEUE_KEYS
            if unknown:
                raise UsageError(f"a job spec takes enqueue's options, not {sorted(unknown)}")
            unique = {k for k in UNIQUE_KEYS | {"unique_key"} if options.get(k) is not None}
            if unique - {"on_conflict"} or options.get("on_conflict", "skip") != "skip":
                raise UsageError(
                    "chain() and group() jobs are enqueued with depends_on, which does not"
                    f" combine with unique_key or its options: {sorted(unique)}"
                )
            job = build_job(
                spec.handler,
                spec.payload,
                options.get("queue"),
                options.get("delay", 0.0),
                options.get("run_at"),
                options.get("priority", 0),
                None,
                options.get("max_attempts"),
                options.get("limit_key"),
                options.get("group_key"),
            )
            built.append((with_tags(job, options.get("tags")), parents, on_failure))
        ids = self.store.enqueue_dependents(built, chained=chained) if built else []
        if self.nudger is not None and built:
            self.nudger.nudge_jobs([job for job, _, _ in built])
        return ids

    def get(self, job_id: int) -> JobRow | None:
        return self.store.get_job(job_id)

    def cancel(self, job_id: int, by: str | None = None) -> bool:
        """Cancel one job: True if it is cancelled (it was waiting) or being cancelled (it
        runs: the host running it kills it within 2 s); False if it finished, is dead,
        was cancelled already or does not exist. `by` goes into its last_error."""
        who = by or f"Queue.cancel on {socket.gethostname()} pid {os.getpid()}"
        return self.store.cancel_jobs([job_id], who)[int(job_id)].ok

    def lock(self, name: str, ttl: float = 60.0) -> Lock:
        """A cluster-wide lease: `with q.lock("export", ttl=300) as lock: ...; lock.renew()`."""
        return Lock(self.store, name, ttl)

    def close(self) -> None:
        self.store.close()


def build_job(
    handler: str,
    payload: Any,
    queue: str | None,
    delay: float,
    run_at: datetime | None,
    priority: int,
    unique_key: str | None,
    max_attempts: int | None,
    limit_key: str | None = None,
    group_key: str | None = None,
) -> NewJob:
    """Check and encode one job. The queue defaults to the handler's registered queue."""
    if not isinstance(handler, str) or not handler or len(handler) > 191:
        raise UsageError("handler must be a name of 1 to 191 characters")
    registered = registry.get(handler)
    queue = queue or (registered.queue if registered else "default")
    if len(queue) > 64:
        raise UsageError("queue names have at most 64 characters")
    run_at = _checked_time(delay, run_at)
    _check_priority(priority)
    _check_key("unique_key", unique_key)
    _check_key("limit_key", limit_key)
    if not bucket_key_ok(limit_key):
        raise UsageError("limit_key must not hold a NUL character")
    _check_key("group_key", group_key)
    if max_attempts is None and registered is not None:
        max_attempts = registered.max_attempts
    _check_max_attempts(max_attempts)
    return NewJob(
        handler,
        _encode_payload(payload),
        queue,
        priority,
        float(delay),
        run_at,
        unique_key,
        max_attempts,
        limit_key,
        group_key,
    )


MOST_TAGS = 20


def with_tags(job: NewJob, tags: Any) -> NewJob:
    """`job` carrying `tags`, checked: a list of up to MOST_TAGS names of 1 to 64 characters."""
    if tags is None:
        return job
    if isinstance(tags, str) or not isinstance(tags, Sequence):
        raise UsageError("tags must be a list of names")
    names = list(dict.fromkeys(tags))
    if len(names) > MOST_TAGS or not all(isinstance(t, str) and 0 < len(t) <= 64 for t in names):
        raise UsageError(f"tags: up to {MOST_TAGS} names of 1 to 64 characters")
    return dataclasses.replace(job, tags=tuple(names) or None)


def _checked_time(delay: float, run_at: datetime | None) -> datetime | None:
    """Check when the job runs; `run_at` as an aware time (naive times are taken as UTC)."""
    if not isinstance(delay, int | float) or not math.isfinite(delay) or delay < 0:
        raise UsageError("delay must be a finite number of seconds >= 0")
    if run_at is not None and not isinstance(run_at, datetime):
        raise UsageError("run_at must be a datetime")
    if run_at is not None and run_at.tzinfo is None:
        run_at = run_at.replace(tzinfo=UTC)  # naive times are taken as UTC
    return run_at


def _check_priority(priority: int) -> None:
    if (
        isinstance(priority, bool)
        or not isinstance(priority, int)
        or not -(2**31) <= priority < 2**31
    ):
        raise UsageError("priority must be a 32-bit integer")


def _check_key(name: str, key: str | None) -> None:
    """unique_key, limit_key and group_key: None, or a string that fits their 191-character columns."""
    if key is not None and (not isinstance(key, str) or not key or len(key) > 191):
        raise UsageError(f"{name} must be a string of 1 to 191 characters")


def _check_max_attempts(max_attempts: int | None) -> None:
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise UsageError("max_attempts must be an integer >= 1")


def _encode_payload(payload: Any) -> str:
    """The payload as JSON text; None is an empty object."""
    try:
        payload_json = _PAYLOAD_ENCODER.encode({} if payload is None else payload)
        if not payload_json.isascii():
            payload_json.encode("utf-8")  # a lone surrogate passes the encoder but no driver
    except (TypeError, ValueError, RecursionError) as exc:
        raise UsageError(f"payload must be JSON-serialisable: {exc}") from exc
    return payload_json
