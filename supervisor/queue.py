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
from supervisor.models import JobRow, NewJob
from supervisor.results import JobResult, read_result, wait_result
from supervisor.store import Store, open_store
from supervisor.store.limits.buckets import bucket_key_ok
from supervisor.wake import Nudger

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
)


class Queue:
    """A handle on the queue tables of one database. Cheap; opens its connection lazily."""

    def __init__(
        self, url: str | DatabaseURL | None = None, *, store: Store | None = None, wake: bool = True
    ) -> None:
        """`wake=False` (or FORKQ_WAKE=0): no datagram to local daemons (see wake.py)."""
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
    ) -> int:
        """Add one job and return its id (the existing job's id when `unique_key` is taken).

        With `connection` (a PyMySQL or sqlite3 connection of the caller's), the row is
        written inside the caller's open transaction: it exists iff the caller commits.
        Local daemons are nudged before that commit all the same: a child woken that
        early finds nothing and goes idle (one empty claim), or finds the job if the
        commit came first; either way the poll finds it within `poll_interval`.

        `limit_key` names the job's bucket in a `[limits.NAME]` with `per_key` (a tenant,
        an account): see SPEC "Flow control". `group_key` names its tenant in a fair
        pool (`[pools.X] fair = true`); without one its limit_key is its tenant. `tags` (up
        to 20 names of 1 to 64 characters) are for the dashboard's `tag:NAME` search.
        """
        job = build_job(
            handler,
            payload,
            queue,
            delay,
            run_at,
            priority,
            unique_key,
            max_attempts,
            limit_key,
            group_key,
        )
        job = with_tags(job, tags)
        if connection is not None:
            job_id = self.store.insert_on(connection, job)
        else:
            job_id = self.store.enqueue(job)
        if self.nudger is not None:
            self.nudger.nudge_jobs((job,))
        return job_id

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
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
            built[-1] = with_tags(built[-1], spec.get("tags"))
        ids = self.store.insert_many(built)
        if self.nudger is not None:
            self.nudger.nudge_jobs(built)
        return ids

    def get(self, job_id: int) -> JobRow | None:
        return self.store.get_job(job_id)

    def result(self, job_id: int) -> JobResult:
        """Where the job stands and, once done, what its handler returned (kept when the
        handler or its pool says `keep_result`): `.state`, `.finished`, `.kept`, `.value`."""
        return read_result(self.store, int(job_id))

    def wait(self, job_id: int, timeout: float | None = None) -> JobResult:
        """Wait for the job to end and return its result; TimeoutError after `timeout`
        seconds. Woken by the worker that ends it on this host, else a backed-off poll."""
        return wait_result(self.store, int(job_id), timeout)

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
