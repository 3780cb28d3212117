"""What `forkq status --json` reports: one document, built here for the command line and for
the dashboard's `/api/status` and overview, so the two can never disagree."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from supervisor.config import Config
from supervisor.models import ProcessRow, QueueStats
from supervisor.store import Store
from supervisor.store.limits.upkeep import bucket_status
from supervisor.timing import merge

# `forkq status` counts up to this many jobs per queue and status ("100000+" past it),
# so it stays fast on a table of millions; --exact counts them all.
STATUS_CAP = 100_000


def read_status(
    config: Config, store: Store, cap: int | None = STATUS_CAP
) -> tuple[list[QueueStats], list[dict[str, Any]]]:
    """Queues (capped counts, configured pools and paused queues included) and the
    processes across hosts as `process_view` shows them."""
    queues = store.stats(cap, queues=[pool.name for pool in config.pools])
    processes = store.list_processes()
    now = store.db_now()  # heartbeat ages on the database clock, as the pruning judges them
    stale_after = config.supervisor.process_stale_after
    return queues, [process_view(p, now, stale_after) for p in processes]


def read_limits(config: Config, store: Store, cap: int | None = STATUS_CAP) -> list[dict[str, Any]]:
    """What waits on which limit: per limit and key, running / concurrency, started in the
    rate window / rate, jobs waiting (parked). Empty without [limits]."""
    return [b.as_dict() for b in bucket_status(store, config, cap or STATUS_CAP)]


def read_handlers(store: Store, seconds: float = 3600.0) -> list[dict[str, Any]]:
    """Per handler over the last hour, most attempts first: attempts, failed, failure
    rate, p50 and p95 duration (seconds), from forkq_handler_stats (one bounded range)."""
    totals = merge(store.handler_stats(seconds))
    return [
        {
            "handler": handler,
            "attempts": stats.jobs,
            "failed": stats.failed,
            "failure_rate": round(stats.failure_rate, 4),
            "p50": _rounded(stats.percentile(0.5)),
            "p95": _rounded(stats.percentile(0.95)),
        }
        for handler, stats in sorted(totals.items(), key=lambda item: (-item[1].jobs, item[0]))
    ]


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)


def status_document(
    config: Config,
    cap: int | None,
    queues: Sequence[QueueStats],
    processes: Sequence[dict[str, Any]],
    limits: Sequence[dict[str, Any]] = (),
    handlers: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The JSON document of `forkq status --json` and `/api/status`: the URL without its
    password."""
    return {
        "database": config.database.redacted(),
        "cap": cap,
        "queues": [q.as_dict() for q in queues],
        "processes": list(processes),
        "limits": list(limits),
        "handlers": list(handlers),  # the last hour (read_handlers)
    }


def process_view(process: ProcessRow, now: float, stale_after: float) -> dict[str, Any]:
    """A process row as status shows it: its heartbeat's age on the database clock, and
    whether it is stale (silent for `stale_after`: dead, or cut off from the database)
    and since when. A stale row stays listed, marked, until the chores prune it."""
    beat = process.heartbeat_at.timestamp()
    stale = now - beat >= stale_after
    since = datetime.fromtimestamp(beat + stale_after, UTC) if stale else None
    return {
        **process.as_dict(),
        "heartbeat_age": round(max(0.0, now - beat), 3),
        "stale": stale,
        "stale_since": since.isoformat() if since else None,
    }
