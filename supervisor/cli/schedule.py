"""`forkq schedule add|pause|resume|remove|list`: schedules added at runtime.

They live in forkq_schedules beside the config file's `[schedules.NAME]`; a name the
file defines is the file's, and a change to it here is refused with the reason.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from supervisor.cli.common import command_config, command_store, operator_name, warn_unrunnable
from supervisor.cli.databases import EachStore, database_names, narrowed, several
from supervisor.cli.overview import cmd_schedules
from supervisor.config import MISFIRE_MODES, Config, ScheduleConfig, schedule_from
from supervisor.config.model import HOME_DATABASE
from supervisor.errors import ConfigError, ExitCode, SchemaError, UsageError
from supervisor.escaping import for_terminal
from supervisor.registry import queue_of
from supervisor.store import Store
from supervisor.work.command import load_handlers

SCHEDULES_SCHEMA_VERSION = 9  # forkq_schedules exists from this version on


def schedule_parser(sub: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    actions = sub.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = actions.add_parser("add", parents=[common], help="add a schedule (enqueues from now)")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--cron", required=True, help='cron expression, e.g. "0 4 * * *"')
    add.add_argument("--handler", required=True, help="the handler of the jobs it enqueues")
    add.add_argument("--queue", help="default: the handler's registered queue")
    add.add_argument("--timezone", help="IANA zone the expression is read in (default UTC)")
    add.add_argument("--payload", default="{}", help="JSON object given to every job")
    add.add_argument("--priority", type=int, help="the jobs' priority (default 0)")
    add.add_argument("--misfire", choices=MISFIRE_MODES, help="once (default) or skip")
    for action, text in (
        ("pause", "stop enqueueing its slots (on every host)"),
        ("resume", "enqueue its slots again, from now on"),
        ("remove", "delete it"),
    ):
        actions.add_parser(action, parents=[common], help=text).add_argument("name", metavar="NAME")
    listing = actions.add_parser("list", parents=[common], help="every schedule, file and runtime")
    listing.add_argument("--json", action="store_true", help="print one JSON document")


def cmd_schedule(args: argparse.Namespace) -> int:
    if args.action == "list":
        return cmd_schedules(args)
    from supervisor.cluster.schedules import add_schedule, change_schedule

    config = command_config(args)
    schedule = None
    if args.action == "add":  # checked before the database is asked anything
        try:
            schedule = schedule_from(args.name, _fields(args))
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    database = _database_of(args, config, schedule)
    here = narrowed(config, database)
    with command_store(here) as store:
        _require_table(store)
        by = f"{operator_name()} (forkq schedule)"
        if schedule is not None:  # a name the file has, in any database, is the file's
            add_schedule(store, config, schedule, by)
            added = f"schedule {args.name} added" + (f" in {database}" if several(config) else "")
            print(for_terminal(added))
            if config.from_file:  # as `forkq enqueue` warns of a job that cannot run
                load_handlers(config)
                warn_unrunnable(config, schedule.handler, schedule.queue, "each of its jobs")
        else:
            print(for_terminal(change_schedule(store, here, args.name, args.action, by)))
    return int(ExitCode.OK)


def _database_of(args: argparse.Namespace, config: Config, schedule: ScheduleConfig | None) -> str:
    """Where a schedule lives: its queue's database (the handler's registered queue when
    it names none); to change one, the database that has it (--database NAME to pick)."""
    if not several(config):
        return HOME_DATABASE
    load_handlers(config)  # a schedule without a queue goes where its handler's queue is
    if schedule is not None:
        [database] = database_names(args, config, schedule.queue or queue_of(schedule.handler))
        others = [name for name, _ in config.every_database() if name != database]
        for name, _, store in EachStore(args, config, names=others):  # one down: skipped
            _require_table(store)
            if any(s.name == schedule.name for s in store.runtime_schedules()):
                raise UsageError(
                    f"schedule {schedule.name!r} is in database {name} already:"
                    " a name is one schedule"
                )
        return database
    names = database_names(args, config)
    if len(names) == 1:
        return names[0]
    # One that does not answer is warned of and skipped: a schedule elsewhere still changes.
    having, stores = [], EachStore(args, config, names=names)
    for name, here, store in stores:
        _require_table(store)
        schedules = [*here.schedules, *store.runtime_schedules()]
        having += [name] if any(s.name == args.name for s in schedules) else []
    if len(having) > 1:
        raise UsageError(
            f"schedule {args.name!r} is in {' and '.join(having)}: pick one with --database NAME"
        )
    if not having:
        stores.done()  # not found: exit 1 if it may be in a database that did not answer
    return having[0] if having else HOME_DATABASE


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise UsageError(f"--payload: not JSON: {exc}") from None
    return {
        "cron": args.cron,
        "handler": args.handler,
        "queue": args.queue,
        "timezone": args.timezone,
        "payload": payload,
        "priority": args.priority,
        "misfire": args.misfire,
    }


def _require_table(store: Store) -> None:
    version = store.schema_version() or 0
    if version < SCHEDULES_SCHEMA_VERSION:
        raise SchemaError(
            f"runtime schedules need schema version {SCHEDULES_SCHEMA_VERSION} (this database"
            f" has {version}): run `forkq schema apply`"
        )
