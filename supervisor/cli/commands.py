"""What each `forkq` sub-command does. Nothing here parses arguments or builds SQL:
commands call the store, the queue, the foreground worker or the daemon, and raise
forkq's own errors, which cli.main turns into exit codes."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from supervisor import registry
from supervisor.cli.tables import ERROR_PREFIX, AtLeast, cell, first_line, plural, print_json, table
from supervisor.config import Config, load_config
from supervisor.durations import format_duration
from supervisor.errors import (
    ConfigError,
    ExitCode,
    ForkqError,
    JobNotFound,
    SchemaError,
    UsageError,
)
from supervisor.escaping import for_terminal, lines_for_terminal
from supervisor.models import CancelResult, JobRow, JobState, QueueStats
from supervisor.proc import hostname
from supervisor.queue import Queue
from supervisor.status import STATUS_CAP as STATUS_CAP  # cli.py's --exact help names it
from supervisor.status import read_limits, read_status, status_document
from supervisor.store import SCHEMA_VERSION, Store, open_store
from supervisor.store.base import load_queries, upgrade_statements
from supervisor.work.command import load_handlers

CHECK_TIMEOUT = 5.0  # seconds `forkq check` waits for the database


def _config(args: argparse.Namespace) -> Config:
    """-c FILE, else $FORKQ_CONFIG, else the built-in defaults; a named missing file is fatal."""
    path = args.config or os.environ.get("FORKQ_CONFIG") or None
    return load_config(path, args.database)


@contextmanager
def _store(config: Config, *, schema: bool = True) -> Iterator[Store]:
    """The store, closed afterwards; with `schema`, refuse a missing or old schema first."""
    store = open_store(config.database)
    try:
        if schema:
            store.require_schema()
        yield store
    finally:
        store.close()


# --- commands: the daemon and the foreground worker --------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    config = _config(args)
    # Imported here first so a broken module's error names the config file; the
    # daemon's own import of them before it forks is then a no-op.
    load_handlers(config)
    from supervisor.daemon.master import run_daemon  # the daemon's modules load only for the daemon

    return run_daemon(config, args.config or os.environ.get("FORKQ_CONFIG") or None)


def cmd_web(args: argparse.Namespace) -> int:
    """The dashboard (supervisor/web, the `forkq[web]` extra), imported only for this command."""
    config = _config(args)
    try:
        from supervisor.web.server import serve
    except ImportError as exc:
        raise ConfigError(
            f"forkq web needs the web extra: pip install 'forkq[web]' ({exc})"
        ) from exc
    return serve(config, args.listen, args.read_only)


def cmd_work(args: argparse.Namespace) -> int:
    config = _config(args)
    from supervisor.work.foreground import run_foreground

    return run_foreground(config, args.queues, args.max_jobs, args.burst)


# --- commands: jobs ----------------------------------------------------------------------------


def cmd_enqueue(args: argparse.Namespace) -> int:
    config = _config(args)
    # So the handler's default queue applies.
    load_handlers(config)
    with _store(config) as store:
        job_id = Queue(store=store).enqueue(
            args.handler,
            args.payload,
            queue=args.queue,
            delay=args.delay,
            run_at=args.at,
            priority=args.priority,
            unique_key=args.unique_key,
            limit_key=args.limit_key,
            max_attempts=args.max_attempts,
        )
    print(job_id)
    return int(ExitCode.OK)


def cmd_jobs(args: argparse.Namespace) -> int:
    config = _config(args)
    with _store(config) as store:
        rows = store.list_jobs(status=args.status, queue=args.queue, limit=args.limit)
    if args.json:
        print_json([row.as_dict() for row in rows])
    elif not rows:
        print("no jobs")
    else:
        print(_jobs_table(rows))
    return int(ExitCode.OK)


def _jobs_table(rows: Sequence[JobRow]) -> str:
    headers = ("ID", "STATUS", "QUEUE", "HANDLER", "PRI", "ATTEMPTS", "RUN AT", "LAST ERROR")
    return table(
        headers,
        [
            (
                row.id,
                str(row.status),
                row.queue,
                row.handler,
                row.priority,
                f"{row.attempts}/{row.max_attempts or '-'}",
                row.run_at,
                first_line(row.last_error),
            )
            for row in rows
        ],
    )


def cmd_show(args: argparse.Namespace) -> int:
    config = _config(args)
    with _store(config) as store:
        row = store.get_job(args.id)
    if row is None:
        raise JobNotFound(f"no job with id {args.id}")
    fields = row.as_dict()
    if args.json:
        print_json(fields)
        return int(ExitCode.OK)
    error = fields.pop("last_error")
    width = max(len(key) for key in fields) + 2
    for key, value in fields.items():
        print(f"{key.ljust(width)}{cell(value)}")
    if error:
        print("last_error:")
        for line in lines_for_terminal(str(error)):
            print(f"  {line}")
    else:
        print(f"{'last_error'.ljust(width)}-")
    return int(ExitCode.OK)


def cmd_retry(args: argparse.Namespace) -> int:
    if args.dead == bool(args.ids):
        raise UsageError("retry takes job ids or --dead, not both and not neither")
    if args.queue and not args.dead:
        raise UsageError("--queue goes with --dead")
    config = _config(args)
    with _store(config) as store:
        if args.dead:
            count = store.retry_dead(args.queue)
            print(f"retried {plural(count, 'dead job')}")
            return int(ExitCode.OK)
        return _each_job(store, args.ids, "retried", lambda ids: store.retry_jobs(ids))


def cmd_cancel(args: argparse.Namespace) -> int:
    """Waiting jobs end cancelled now, running ones within 2 s on whatever host runs them;
    a done, dead or unknown job is named, with exit 1 (SPEC: Job lifecycle)."""
    config = _config(args)
    with _store(config) as store:
        results = store.cancel_jobs(args.ids, by=f"{_operator()} (forkq cancel)")
    cancelled = sum(1 for r in results.values() if r == CancelResult.CANCELLED)
    stopping = sum(1 for r in results.values() if r == CancelResult.CANCELLING)
    print(f"cancelled {plural(cancelled, 'job')}")
    if stopping:
        print(f"cancelling {plural(stopping, 'running job')}: stopped within 2 s where they run")
    refused = [f"job {i} ({r})" for i, r in results.items() if not r.ok]
    if refused:
        raise ForkqError(f"not cancelled: {', '.join(refused)}")
    return int(ExitCode.OK)


def _operator() -> str:
    """user@host of whoever runs this command, for the last_error of what it cancels."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = f"uid {os.getuid()}"
    return f"{user}@{hostname()}"


def _each_job(
    store: Store, ids: Sequence[int], verb: str, operation: Callable[[list[int]], int]
) -> int:
    """Apply `operation` job by job, so every id that was not changed is named with why."""
    done, refused = 0, []
    for job_id in dict.fromkeys(ids):
        if operation([job_id]):
            done += 1
            continue
        row = store.get_job(job_id)
        reason = (
            "no such job"
            if row is None
            else "running (wait for it to finish)"
            if row.status in (JobState.RUNNING, JobState.CANCELLING)
            else "archived"
        )
        refused.append(f"job {job_id} ({reason})")
    print(f"{verb} {plural(done, 'job')}")
    if refused:
        raise JobNotFound(f"not {verb}: {', '.join(refused)}")
    return int(ExitCode.OK)


def cmd_purge(args: argparse.Namespace) -> int:
    config = _config(args)
    statuses = [s for s, wanted in (("done", args.done), ("dead", args.dead)) if wanted]
    counts: dict[str, int] = {}
    with _store(config) as store:
        for status in statuses or ["done", "dead"]:
            counts[status] = store.purge(status, args.older_than, queue=args.queue)
            if status == "done":
                counts[status] += store.purge_archive(args.older_than, queue=args.queue)
    summary = " and ".join(f"{count} {status}" for status, count in counts.items())
    age = format_duration(args.older_than) if args.older_than else "0s"
    print(f"purged {summary} jobs finished more than {age} ago")
    return int(ExitCode.OK)


# --- commands: queues and processes --------------------------------------------------------------


def cmd_pause(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=False)


def _set_paused(args: argparse.Namespace, *, paused: bool) -> int:
    config = _config(args)
    with _store(config) as store:
        store.set_paused(args.queue, paused)
    print(f"queue {args.queue} {'paused' if paused else 'resumed'}")
    return int(ExitCode.OK)


def cmd_status(args: argparse.Namespace) -> int:
    config = _config(args)
    cap = None if args.exact else STATUS_CAP
    with _store(config) as store:
        queues, views = read_status(config, store, cap)
        limits = read_limits(config, store, cap)
    if args.json:
        print_json(status_document(config, cap, queues, views, limits))
        return int(ExitCode.OK)
    print(_queues_table(queues))
    print()
    if limits:
        print(_limits_table(limits))
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
    headers = ("QUEUE", "READY", "DELAYED", "RUNNING", "DEAD", "DONE", "OLDEST", "PAUSED")
    counts = ("ready", "delayed", "running", "dead", "done")
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
    config = _config(args)
    with _store(config) as store:
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
    config = _config(args)
    with _store(config) as store:
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
        rows = [{**e, "queue": e["queue"] or "(handler's)"}.values() for e in entries]
        print(table(headers, [tuple(row) for row in rows]))
    return int(ExitCode.OK)


def _schedule_entries(config: Config, store: Store) -> list[dict[str, Any]]:
    from supervisor.cluster.schedules import (
        next_run,  # the cron machinery loads only when asked for
    )

    now = store.db_now()  # the clock the schedules are enqueued by
    entries = []
    for s in config.schedules:
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
            }
        )
    return entries


def _from_epoch(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


def cmd_alerts(args: argparse.Namespace) -> int:
    config = _config(args)
    from supervisor.cluster.alerts.channels import send_test

    results = send_test(config.alerts, hostname())
    if not results:
        raise ForkqError("no alert channel is configured: set [alerts] webhook_url or email_to")
    for result in results:
        status = "ok  " if result.ok else "FAIL"
        error = for_terminal(" ".join(result.error.split()))
        print(f"{status}  {result.channel}  {error}".rstrip())
    failed = [r.channel for r in results if not r.ok]
    if failed:
        raise ForkqError(f"test alert failed on: {', '.join(failed)}")
    return int(ExitCode.OK)


# --- commands: schema and check --------------------------------------------------------------------


def cmd_schema(args: argparse.Namespace) -> int:
    config = _config(args)
    upgrade_from: int | None = args.upgrade_from
    if upgrade_from is not None and args.action != "print":
        raise UsageError("--upgrade-from goes with `schema print`")
    if args.action == "print":
        here = Path(__file__).parents[1] / "store"
        backend = config.database.backend
        if upgrade_from is None:
            sys.stdout.write((here / f"{backend}_schema.sql").read_text(encoding="utf-8"))
        else:
            # Only the statements, each ending in `;`: a reviewed migration file as it is.
            queries = load_queries(here / f"{backend}.sql")
            for statement in upgrade_statements(queries, upgrade_from):
                print(f"{statement};")
        return int(ExitCode.OK)
    with _store(config, schema=False) as store:
        version = store.apply_schema()
    print(f"schema version {version} applied to {config.database.redacted()}")
    return int(ExitCode.OK)


class _Checks:
    """One printed line per check; remembers what failed and whether it was the config."""

    def __init__(self) -> None:
        self.failed: list[str] = []
        self.config_failed = False

    def ok(self, name: str, detail: str) -> None:
        print(f"ok    {name.ljust(9)} {detail}")

    def fail(self, name: str, detail: str, *, config: bool = False) -> None:
        for line in detail.splitlines() or [""]:
            print(f"FAIL  {name.ljust(9)} {for_terminal(line)}")
        self.failed.append(name)
        self.config_failed = self.config_failed or config

    def skip(self, name: str, reason: str) -> None:
        print(f"skip  {name.ljust(9)} {reason}")


def cmd_check(args: argparse.Namespace) -> int:
    checks = _Checks()
    try:
        config = _config(args)
    except ConfigError as exc:
        checks.fail("config", str(exc), config=True)
        for name in ("handlers", "database", "schema"):
            checks.skip(name, "the config is invalid")
        return _check_result(checks)
    checks.ok("config", f"{config.source}: {plural(len(config.pools), 'pool')}")
    try:
        modules = load_handlers(config)
        checks.ok("handlers", f"{', '.join(modules) or 'none'}: {len(registry.names())} registered")
    except ConfigError as exc:
        checks.fail("handlers", str(exc), config=True)
    _check_database(config, checks)
    return _check_result(checks)


def _check_database(config: Config, checks: _Checks) -> None:
    url = config.database.redacted()
    store = open_store(config.database, timeout=CHECK_TIMEOUT)
    try:
        version = store.server_version()
        checks.ok("database", f"{url} ({version})")
        _check_schema(store, checks)
    except ForkqError as exc:
        checks.fail("database", f"{url}: {' '.join(str(exc).split())}")
        checks.skip("schema", "the database is unreachable")
    finally:
        store.close()


def _check_schema(store: Store, checks: _Checks) -> None:
    try:
        store.require_schema()
        current = store.schema_version()
    except SchemaError as exc:
        checks.fail("schema", str(exc))
        return
    if current is not None and current > SCHEMA_VERSION:
        checks.fail("schema", f"version {current} is newer than this forkq ({SCHEMA_VERSION})")
    elif current is not None and current < SCHEMA_VERSION:
        checks.ok(
            "schema", f"version {current}; {SCHEMA_VERSION} is available: run `forkq schema apply`"
        )
    else:
        checks.ok("schema", f"version {current}")


def _check_result(checks: _Checks) -> int:
    if not checks.failed:
        return int(ExitCode.OK)
    print(f"{ERROR_PREFIX}check failed: {', '.join(checks.failed)}", file=sys.stderr)
    return int(ExitCode.CONFIG if checks.config_failed else ExitCode.FAILURE)
