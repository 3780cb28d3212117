"""Scheduled jobs: made ready shortly before they fall due, so claims never walk them.

A job due later than `SCHEDULE_AHEAD` is stored `scheduled`, outside the claim's index
range. The master (on its poll, every `poll_interval` while a child is idle and every
`PROMOTE_INTERVAL` in any case) and `forkq work` promote those about to fall due; the
claim itself still waits for `run_at`, so promotion ahead of time never makes a job
early. A raw INSERT with a future `run_at` lands `ready` (the column's default); when
the poll sees a ready row far ahead it is demoted, so it too leaves the claim's range.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from supervisor.models import QueueTimes
from supervisor.store import PROMOTE_BATCH, SCHEDULE_AHEAD, Store

PROMOTE_INTERVAL = 1.0  # seconds: half the horizon, so a promotion is never late
MAX_BATCHES = 20  # per queue and poll: a huge due backlog is moved over several polls


def needs_promotion(times: QueueTimes) -> bool:
    return times.scheduled_in is not None and times.scheduled_in <= SCHEDULE_AHEAD


def needs_demotion(times: QueueTimes) -> bool:
    return times.last_ready_in is not None and times.last_ready_in > SCHEDULE_AHEAD


def keep_schedule(store: Store, times: Mapping[str, QueueTimes]) -> int:
    """Promote and demote what the poll said needs it; how many rows moved."""
    moved = 0
    for queue, queue_times in times.items():
        if needs_promotion(queue_times):
            moved += _drain(store.promote, queue)
        if needs_demotion(queue_times):
            moved += _drain(store.demote, queue)
    return moved


def keep_schedule_of(store: Store, queues: list[str]) -> int:
    """One poll, then whatever it calls for (`forkq work`, which has no poll of its own)."""
    return keep_schedule(store, store.poll(queues))


def _drain(step: Callable[[str, int], int], queue: str) -> int:
    total = 0
    for _ in range(MAX_BATCHES):
        moved = step(queue, PROMOTE_BATCH)
        total += moved
        if moved < PROMOTE_BATCH:
            break
    return total
