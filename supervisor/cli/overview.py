"""`forkq status, locks, schedules`: the cluster's state as tables or JSON, read only."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from supervisor.cli.common import command_config, command_store, status_cap
from supervisor.cli.tables import AtLeast, cell, print_json, table
from supervisor.config import Config, ScheduleConfig
from supervisor.durations import format_duration
from supervisor.errors import ExitCode
from supervisor.models import QueueStats
from supervisor.status import read_handlers, read_limits, read_status, status_document
from supervisor.store import Store
from supervisor.timing import seconds_text


def cmd_status(args: argparse.Namespace) -> int:
    config = command_config(args)
    cap = status_cap(args)
    with command_store(config) as store:
        queues, views = read_status(config, store, cap)
        limits = read_limits(config, store, cap)
        handlers = read_handlers(store)
    if args.json:
        print_json(status_document(config, cap, queues, views, limits, handlers))
        return int(ExitCode.OK)
    print(_queues_table(queues))
    if waiting := [f"{q.queue} {q.shown('waiting')}" for q in queues if q.waiting]:
        print(f"\nwaiting on parents (depends_on): {', '.join(waiting)}")
    unserved = [q.queue for q in queues if config.from_file and config.pool(q.queue) is None]
    if unserved:  # "not paused" is not "worked": say which queues nothing claims from
        print(f"\nno pool of {config.source} serves: {', '.join(unserved)}")
    print()
    if limits:
        print(_limits_table(limits))
        print()
    if handlers:
        print("handlers, the last hour:")
        print(_handlers_table(handlers))
        print()
    if not views:
        print("no forkq processes are running")
        return int(ExitCode.OK)
    rows = [
        (
            v["host"],
            v["pid"],
            v["role"],
            v["pool"],
            f"stale since {cell(datetime.fromisoformat(v['stale_since']))}"
            if v["stale"]
            else "live",
            f"{format_duration(v['heartbeat_age'])} ago",
        )
        for v in views
    ]
    print(table(("HOST", "PID", "ROLE", "POOL", "STATE", "HEARTBEAT"), rows))
    stale = sum(1 for v in views if v["stale"])
    if stale:
        print(
            f"\n{stale} process{'' if stale == 1 else 'es'} stale: no heartbeat for"
            f" {format_duration(config.supervisor.process_stale_after)} or more"
            " (process_stale_after); the host is down or cannot reach the database"
        )
    return int(ExitCode.OK)


def _queues_table(queues: Sequence[QueueStats]) -> str:
    """Counts that reached the cap read "100000+"."""
    headers = (
        "QUEUE", "READY", "DELAYED", "RUNNING", "DEAD", "DONE", "CANCELLED", "OLDEST", "PAUSED",
    )  # fmt: skip
    counts = ("ready", "delayed", "running", "dead", "done", "cancelled")
    rows = [
        (
            q.queue,
            *(AtLeast(getattr(q, c)) if c in q.capped else getattr(q, c) for c in counts),
            format_duration(q.oldest_ready_age) if q.ready else "-",
            q.paused,
        )
        for q in queues
    ]
    return table(headers, rows)


def _handlers_table(handlers: Sequence[dict[str, Any]]) -> str:
    rows = [
        (
            h["handler"],
            h["attempts"],
            h["failed"],
            f"{h['failure_rate']:.1%}",
            seconds_text(h["p50"]),
            seconds_text(h["p95"]),
        )
        for h in handlers
    ]
    return table(("HANDLER", "ATTEMPTS", "FAILED", "FAILURE", "P50", "P95"), rows)


def _limits_table(limits: Sequence[dict[str, Any]]) -> str:
    """Per limit and key: running of its concurrency, started in the rate window of its
    rate, and the jobs waiting on it (ready, not claimed until it has room)."""
    rows = [
        (
            b["limit"],
            b["key"] or "-",
            f"{b['running']}/{b['concurrency']}" if b["concurrency"] else b["running"],
            f"{b['started']}/{b['rate']}" if b["rate"] else "-",
            f"{b['waiting']}+" if b["waiting_capped"] and b["waiting"] else b["waiting"],
        )
        for b in limits
    ]
    return table(("LIMIT", "KEY", "RUNNING", "STARTED", "WAITING"), rows)


def cmd_locks(args: argparse.Namespace) -> int:
    config = command_config(args)
    with command_store(config) as store:
        locks = store.list_locks()
    if args.json:
        print_json(
            [
                {
                    "name": lock.name,
                    "owner": lock.owner,
                    "acquired_at": lock.acquired_at.isoformat() if lock.acquired_at else None,
                    "expires_at": lock.expires_at.isoformat(),
                    "live": live,
                }
                for lock, live in locks
            ]
        )
    elif not locks:
        print("no locks")
    else:
        rows = [
            (lock.name, lock.owner if live else None, lock.acquired_at, lock.expires_at, live)
            for lock, live in locks
        ]
        print(table(("NAME", "OWNER", "ACQUIRED", "EXPIRES", "HELD"), rows))
    return int(ExitCode.OK)


def cmd_schedules(args: argparse.Namespace) -> int:
    config = command_config(args)
    with command_store(config) as store:
        entries = _schedule_entries(config, store)
    if args.json:
        print_json(
            [
                {k: v.isoformat() if isinstance(v, datetime) else v for k, v in e.items()}
                for e in entries
            ]
        )
    elif not entries:
        print("no schedules configured")
    else:
        headers = ("NAME", "CRON", "TIMEZONE", "HANDLER", "QUEUE", "LAST SLOT", "NEXT RUN")
        headers += ("SOURCE", "STATE")  # type: ignore[assignment]
        rows = [{**e, "queue": e["queue"] or "(handler's)"}.values() for e in entries]
        print(table(headers, [tuple(row) for row in rows]))
    return int(ExitCode.OK)


def _schedule_entries(config: Config, store: Store) -> list[dict[str, Any]]:
    from supervisor.cluster.schedules import (
        next_run,  # the cron machinery loads only when asked for
    )

    now = store.db_now()  # the clock the schedules are enqueued by
    entries = []
    runtime = store.runtime_schedules() if (store.schema_version() or 0) >= 9 else []
    names = {s.name for s in config.schedules}
    for s in [*config.schedules, *runtime]:
        try:
            upcoming: float | None = next_run(s.cron, s.timezone, now)
        except ValueError:  # a valid expression that never comes due (Feb 30)
            upcoming = None
        entries.append(
            {
                "name": s.name,
                "cron": s.cron,
                "timezone": s.timezone,
                "handler": s.handler,
                "queue": s.queue,  # None: the handler's registered queue
                "last_slot": _from_epoch(store.last_slot(s.name)),
                "next_run": _from_epoch(upcoming),
                "source": "runtime" if s.since is not None else "file",
                "state": _state(s, names),
            }
        )
    return entries


def _state(schedule: ScheduleConfig, file_names: set[str]) -> str:
    if schedule.since is None:
        return "active"
    if schedule.name in file_names:
        return "ignored: the file's"
    return "paused" if schedule.paused else "active"


def _from_epoch(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)
