"""Attempts a Django task never saw end, from forkq's attempt history (forkq_attempts).

The worker records an attempt in forkq_results when the task returns or raises. An
attempt whose worker died or was killed (out of memory, past the pool's timeout), whose
lease ran out or that was cancelled while it ran ends where the task cannot record it;
forkq's history has it. A result (and the record the next attempt writes) takes those
from there, so `errors`, `worker_ids` and `attempts` count every attempt.
"""

from __future__ import annotations

from typing import Any

from .django_results import (
    TaskAttemptLost,
    TaskCancelled,
    class_path,
    decode_payload,
    encode_json,
    json_list,
    same_enqueue,
)

# How forkq's attempt history (forkq_attempts.outcome) names an end the task never saw:
# its worker died or was killed (past the timeout too), its lease ran out, it was cancelled.
LOST_OUTCOMES: dict[str, type[Exception]] = {
    "died": TaskAttemptLost,
    "timeout": TaskAttemptLost,
    "lease_expired": TaskAttemptLost,
    "cancelled": TaskCancelled,
}


def ended_attempts(job: dict[str, Any]) -> int:
    """How many of the job's attempts have ended (a running job's last one has not)."""
    return int(job["attempts"]) - (job["status"] in ("running", "cancelling"))


def misses_attempts(job: dict[str, Any], record: dict[str, Any] | None) -> bool:
    """Whether more attempts ended than the result row holds: some ended where the task
    never saw it (forkq's attempt history has them: with_lost_attempts)."""
    return ended_attempts(job) > len(json_list((record or {}).get("workers")))


def with_lost_attempts(
    job: dict[str, Any], record: dict[str, Any] | None, history: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """The result row with the attempts the task never saw end added from forkq's attempt
    history (`Store.job_attempts`, oldest first): each one's error (TaskAttemptLost or
    TaskCancelled, forkq's reason as its traceback) and worker, in attempt order. Attempt
    rows of an earlier job that had the same id ended before this one was enqueued."""
    try:
        payload = decode_payload(job["payload"])
    except ValueError:
        return record  # no task's row: build_result says so
    if record is not None and not same_enqueue(record, payload):
        record = None
    recorded = record or {"payload": job["payload"]}
    errors = json_list(recorded.get("errors"))
    seen = {e.get("attempt") for e in errors if isinstance(e, dict)}
    enqueued = float(job["enqueued_at"])
    lost = {
        int(h["attempt"]): h
        for h in history
        if h["outcome"] in LOST_OUTCOMES
        and int(h["attempt"]) not in seen
        and float(h["ended_at"]) >= enqueued
    }
    if not lost:
        return record
    workers, known = [], iter(json_list(recorded.get("workers")))
    for attempt in range(1, max(ended_attempts(job), max(lost)) + 1):
        worker = lost[attempt]["worker"] if attempt in lost else next(known, None)
        if worker is not None:
            workers.append(str(worker))
    for attempt, h in lost.items():
        kind = LOST_OUTCOMES[h["outcome"]]
        errors.append(
            {"attempt": attempt, "exception_class_path": class_path(kind), "traceback": h["error"]}
        )
    errors.sort(key=lambda e: int(e.get("attempt") or 0))
    merged = {**recorded, "errors": encode_json(errors), "workers": encode_json(workers)}
    starts = [float(h["started_at"]) for h in lost.values() if h.get("started_at") is not None]
    first = recorded.get("started_at")
    if starts and (first is None or min(starts) < float(first)):
        merged["started_at"] = min(starts)  # the first attempt's start (README: started_at)
    return merged
