"""What `forkq status --json` reports: one document, built here for the command line and for
the dashboard's `/api/status` and overview, so the two can never disagree."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from supervisor.config import Config
from supervisor.dburl import DatabaseURL
from supervisor.models import ProcessRow, QueueStats
from supervisor.registry import queue_of
from supervisor.store import Store, open_store
from supervisor.store.limits.upkeep import bucket_status
from supervisor.timing import merge

# `forkq status` counts up to this many jobs per queue and status ("100000+" past it),
# so it stays fast on a table of millions; --exact counts them all.
STATUS_CAP = 100_000
# How long status waits on one database's statements (its connect timeout is 5 s at most):
# a database that hangs must not hold back the others' lines for a minute.
STATUS_TIMEOUT = 10.0


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


# --- several databases ([databases.NAME]) --------------------------------------------------


@dataclass
class DatabaseStatus:
    """One database's part of `forkq status`: its figures, or why it did not answer."""

    name: str
    url: str  # without its password
    queues: list[QueueStats] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    limits: list[dict[str, Any]] = field(default_factory=list)
    handlers: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None  # set: it did not answer (the rest is empty)


def read_database_status(config: Config, cap: int | None = STATUS_CAP) -> DatabaseStatus:
    """The status of `config.database` (a config narrowed by for_database); an error
    from any step is caught and said, so one database down never hides the others."""
    url = config.database
    found = DatabaseStatus(config.database_name, url.redacted())
    found.error = missing_sqlite(url)  # never created by looking
    if found.error is not None:
        return found
    store = open_store(url, timeout=STATUS_TIMEOUT)
    try:
        store.require_schema()
        found.queues, found.processes = read_status(config, store, cap)
        found.limits = read_limits(config, store, cap)
        found.handlers = read_handlers(store)
    except Exception as exc:  # down, refused, no schema: said, without its password
        found = DatabaseStatus(found.name, found.url, error=why_down(exc, url))
    finally:
        store.close()
    return found


def read_every_status(
    config: Config, cap: int | None = STATUS_CAP, names: Sequence[str] | None = None
) -> list[DatabaseStatus]:
    """Every database's status (or those of `names`), the home one first, one after the
    other: one that does not answer costs at most its connect timeout."""
    wanted = names or [name for name, _ in config.every_database()]
    return [read_database_status(config.for_database(n, queue_of), cap) for n in wanted]


def every_status_document(
    config: Config, cap: int | None, statuses: Sequence[DatabaseStatus]
) -> dict[str, Any]:
    """`forkq status --json` with several databases: each database's status_document
    with its `name`, `reachable` and `error`; `unreachable` lists those down."""
    documents = []
    for s in statuses:
        here = replace(config, database=config.url_of(s.name))
        body = status_document(here, cap, s.queues, s.processes, s.limits, s.handlers)
        documents.append({"name": s.name, "reachable": s.error is None, "error": s.error, **body})
    down = [s.name for s in statuses if s.error is not None]
    return {"cap": cap, "databases": documents, "unreachable": down}


def missing_sqlite(url: DatabaseURL) -> str | None:
    """What to say of an SQLite file that is not there (opening it would create it)."""
    if url.backend != "sqlite" or url.path == ":memory:" or os.path.exists(url.path):
        return None
    return f"no SQLite database at {os.path.abspath(url.path)}"


def why_down(exc: BaseException, url: DatabaseURL) -> str:
    """Why a database did not answer, in one line and never with its password."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = text.removeprefix("database unreachable: ")  # said by "NAME: unreachable: "
    for each in (url, *url.nodes):  # a driver's message should never hold it; be sure
        if each.password:
            text = text.replace(each.password, "***")
    return text
