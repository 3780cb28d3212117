"""`forkq status, locks, schedules`: the cluster's state as tables or JSON, read only."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from supervisor import registry
from supervisor.cli.common import command_config, command_store, status_cap
from supervisor.cli.databases import EachStore, database_names, several
from supervisor.cli.tables import AtLeast, cell, plural, print_json, table
from supervisor.config import Config, ScheduleConfig
from supervisor.durations import format_duration
from supervisor.errors import ExitCode, ForkqError
from supervisor.escaping import for_terminal
from supervisor.models import QueueStats
from supervisor.status import (
    every_status_document,
    read_every_status,
    read_handlers,
    read_limits,
    read_status,
    status_document,
)
from supervisor.store import Store
from supervisor.timing import seconds_text
from supervisor.work.command import load_handlers


def cmd_status(args: argparse.Namespace) -> int:
    config = command_config(args)
    cap = status_cap(args)
    if several(config):
        return _status_of_several(args, config, cap)
    with command_store(config) as store:
        queues, views = read_status(config, store, cap)
        limits = read_limits(config, store, cap)
        handlers = read_handlers(store)
    if args.json:
        print_json(status_document(config, cap, queues, views, limits, handlers))
        return int(ExitCode.OK)
    _print_status(config, queues, views, limits, handlers)
    return int(ExitCode.OK)


def _status_of_several(args: argparse.Namespace, config: Config, cap: int | None) -> int:
    """Each database under its name; one that does not answer is said so (`NAME:
    unreachable: why`) while the others are shown, and the exit is 1."""
    statuses = read_every_status(config, cap, database_names(args, config))
    if args.json:
        print_json(every_status_document(config, cap, statuses))
    for index, s in enumerate([] if args.json else statuses):
        if index:
            print()
        if s.error is not None:
            print(f"{s.name}: unreachable: {for_terminal(s.error)}")
            continue
        print(f"database {s.name}: {s.url}\n")
        here = config.for_database(s.name, registry.queue_of)
        _print_status(here, s.queues, s.processes, s.limits, s.handlers)
    down = [s.name for s in statuses if s.error is not None]
    if down:
        raise ForkqError(f"{plural(len(down), 'database')} did not answer: {', '.join(down)}")
    return int(ExitCode.OK)


def _print_status(
    config: Config,
    queues: Sequence[QueueStats],
    views: Sequence[dict[str, Any]],
    limits: Sequence[dict[str, Any]],
    handlers: Sequence[dict[str, Any]],
) -> None:
    print(_queues_table(queues))
    # Queue names come from rows: escaped as the table's are (escaping.py).
    if waiting := [f"{q.queue} {q.shown('waiting')}" for q in queues if q.waiting]:
        print(f"\nwaiting on parents (depends_on): {for_terminal(', '.join(waiting))}")
    unserved = [q.queue for q in queues if config.from_file and config.pool(q.queue) is None]
    if unserved:  # "not paused" is not "worked": say which queues nothing claims from
        print(f"\nno pool of {config.source} serves: {for_terminal(', '.join(unserved))}")
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
        return
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
    labelled = several(config)
    locks = []
    stores = EachStore(args, config)
    for database, _, store in stores:
        locks += [(database, lock, live) for lock, live in store.list_locks()]
    if args.json:
        print_json(
            [
                {
                    "name": lock.name,
                    "owner": lock.owner,
                    "acquired_at": lock.acquired_at.isoformat() if lock.acquired_at else None,
                    "expires_at": lock.expires_at.isoformat(),
                    "live": live,
                    **({"database": database} if labelled else {}),
                }
                for database, lock, live in locks
            ]
        )
    elif not locks:
        print("no locks")
    else:
        rows = [
            (lock.name, lock.owner if live else None, lock.acquired_at, lock.expires_at, live)
            for _, lock, live in locks
        ]
        headers = ("NAME", "OWNER", "ACQUIRED", "EXPIRES", "HELD")
        print(_with_database(headers, rows, [d for d, _, _ in locks] if labelled else None))
    return stores.done()


def _with_database(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], databases: Sequence[str] | None
) -> str:
    """A table, with a DATABASE column first when there are several databases."""
    if databases is None:
        return table(headers, rows)
    labelled = [(d, *row) for d, row in zip(databases, rows, strict=True)]
    return table(("DATABASE", *headers), labelled)


def cmd_schedules(args: argparse.Namespace) -> int:
    config = command_config(args)
    labelled = several(config)
    if labelled:  # a schedule without a queue is listed where its handler's queue lives
        load_handlers(config)
    entries = []
    stores = EachStore(args, config)
    for database, here, store in stores:
        found = _schedule_entries(here, store)
        entries += [{**e, "database": database} if labelled else e for e in found]
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
        shown = [{k: v for k, v in e.items() if k != "database"} for e in entries]
        rows = [tuple({**e, "queue": e["queue"] or "(handler's)"}.values()) for e in shown]
        databases = [e["database"] for e in entries] if labelled else None
        print(_with_database(headers, rows, databases))
    return stores.done()


def _schedule_entries(config: Config, store: Store) -> list[dict[str, Any]]:
    from supervisor.cluster.schedules import (
        next_slot,  # the cron machinery loads only when asked for
    )

    now = store.db_now()  # the clock the schedules are enqueued by
    entries = []
    runtime = store.runtime_schedules() if (store.schema_version() or 0) >= 9 else []
    names = {s.name for s in config.schedules}
    grace = config.supervisor.check_interval  # a slot due is enqueued by the next tick
    for s in [*config.schedules, *runtime]:
        state = _state(s, names)
        last = store.last_slot(s.name)
        try:  # a paused or ignored schedule has no next run
            active = state == "active"
            upcoming = next_slot(s.cron, s.timezone, now, last, grace) if active else None
        except ValueError:  # a valid expression that never comes due (Feb 30)
            upcoming = None
        entries.append(
            {
                "name": s.name,
                "cron": s.cron,
                "timezone": s.timezone,
                "handler": s.handler,
                "queue": s.queue,  # None: the handler's registered queue
                "last_slot": _from_epoch(last),
                "next_run": _from_epoch(upcoming),
                "source": "runtime" if s.since is not None else "file",
                "state": state,
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
