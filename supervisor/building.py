"""A job checked and encoded before it is written: what `Queue.enqueue`, `enqueue_many`,
batches, chains, schedules and the dashboard's actions build (the producer's side)."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from supervisor import registry
from supervisor.errors import UsageError
from supervisor.models import NewJob
from supervisor.store.limits.buckets import bucket_key_ok
from supervisor.unique import UNIQUE_KEYS, with_unique

# One encoder for every payload: json.dumps with options builds a new one per call.
PAYLOAD_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)

ENQUEUE_KEYS = (
    frozenset(
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
    | UNIQUE_KEYS
)


def build_many(jobs: Iterable[Mapping[str, Any]]) -> list[NewJob]:
    """enqueue_many's jobs, each checked as enqueue checks one."""
    built = []
    for spec in jobs:
        unknown = set(spec) - ENQUEUE_KEYS
        if unknown & {"depends_on", "on_parent_failure"}:
            raise UsageError(
                "enqueue_many: depends_on is not taken here: enqueue such jobs one by one,"
                " or as q.chain() / q.group()"
            )
        if unknown:
            raise UsageError(f"enqueue_many: unknown keys {sorted(unknown)}")
        if "handler" not in spec:
            raise UsageError("enqueue_many: every job needs a 'handler'")
        job = build_job(
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
        built.append(
            with_unique(
                with_tags(job, spec.get("tags")),
                spec.get("unique_for"),
                spec.get("unique_while"),
                spec.get("on_conflict", "skip"),
                spec.get("debounce_max"),
            )
        )
    return built


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
    queue = queue or registry.queue_of(handler)
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
        encode_payload(payload),
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
    if key is not None and key.endswith(" "):  # MySQL's collation pads: "a " would be "a"
        raise UsageError(
            f"{name} must not end with a space: MySQL compares {key!r} as equal to {key.rstrip()!r}"
        )


def _check_max_attempts(max_attempts: int | None) -> None:
    if max_attempts is not None and (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not 1 <= max_attempts < 2**31  # MySQL's INT column
    ):
        raise UsageError(f"max_attempts must be an integer from 1 to {2**31 - 1}")


def encode_payload(payload: Any) -> str:
    """The payload as JSON text; None is an empty object."""
    try:
        payload_json = PAYLOAD_ENCODER.encode({} if payload is None else payload)
        if not payload_json.isascii():
            payload_json.encode("utf-8")  # a lone surrogate passes the encoder but no driver
    except (TypeError, ValueError, RecursionError) as exc:
        raise UsageError(f"payload must be JSON-serialisable: {exc}") from exc
    return payload_json
