"""Uniqueness windows and scopes (SPEC "Composing jobs"): check what enqueue was given.

The database enforces them: forkq_jobs.unique_live, generated from unique_key,
unique_for, unique_while, status and enqueued_at, is NULL outside the states that hold
the key and the window number inside them, under the UNIQUE index (unique_key,
unique_live). So a raw INSERT is held to them too; this module only checks arguments.
"""

from __future__ import annotations

import dataclasses
import math
import time
from datetime import UTC, datetime
from typing import Any

from supervisor.errors import UsageError
from supervisor.models import NewJob

SCOPES = ("queued", "active", "kept")  # unique_while: which states hold the key
ON_CONFLICT = ("skip", "replace", "debounce")
UNIQUE_KEYS = frozenset({"unique_for", "unique_while", "on_conflict", "debounce_max"})
LONGEST_WINDOW = 2**31 - 1  # seconds (an INT UNSIGNED column would take more)


def with_unique(
    job: NewJob,
    unique_for: Any = None,
    unique_while: Any = None,
    on_conflict: Any = "skip",
    debounce_max: Any = None,
) -> NewJob:
    """`job` with its uniqueness window, scope and conflict action, checked."""
    if unique_for is None and unique_while is None and on_conflict == "skip":
        if debounce_max is not None:
            raise UsageError('debounce_max goes with on_conflict="debounce"')
        return job
    if job.unique_key is None:
        raise UsageError("unique_for, unique_while and on_conflict need a unique_key")
    if unique_for is not None and (
        isinstance(unique_for, bool)
        or not isinstance(unique_for, int)
        or not 0 < unique_for <= LONGEST_WINDOW
    ):
        raise UsageError(f"unique_for must be a whole number of seconds, 1 to {LONGEST_WINDOW}")
    if unique_while is not None and unique_while not in SCOPES:
        raise UsageError(f"unique_while must be one of {', '.join(SCOPES)}")
    if on_conflict not in ON_CONFLICT:
        raise UsageError(f"on_conflict must be one of {', '.join(ON_CONFLICT)}")
    if debounce_max is not None:
        if on_conflict != "debounce":
            raise UsageError('debounce_max goes with on_conflict="debounce"')
        if (
            isinstance(debounce_max, bool)
            or not isinstance(debounce_max, int | float)
            or not math.isfinite(debounce_max)
            or not 0 < debounce_max <= LONGEST_WINDOW
        ):
            raise UsageError(
                f"debounce_max must be a number of seconds, > 0 and <= {LONGEST_WINDOW}"
            )
        job = _waiting_at_most(job, float(debounce_max))
    return dataclasses.replace(
        job,
        unique_for=unique_for,
        unique_while=unique_while,
        on_conflict=on_conflict,
        debounce_max=None if debounce_max is None else float(debounce_max),
    )


def _waiting_at_most(job: NewJob, debounce_max: float) -> NewJob:
    """A debounced job runs at the latest debounce_max after the first enqueue: the first
    one's own wait (delay or run_at) is capped so too, as a later one's push is."""
    if job.run_at is None:
        return dataclasses.replace(job, delay=min(job.delay, debounce_max))
    latest = time.time() + debounce_max
    if job.run_at.timestamp() <= latest:  # (a huge debounce_max: no datetime made of it)
        return job
    return dataclasses.replace(job, run_at=datetime.fromtimestamp(latest, UTC))
