"""`forkq`: argparse sub-commands, and the one place exceptions become exit codes.

Every sub-command takes `-c/--config FILE`, `--database URL` and `--debug`, before or
after its name. Exit codes are a contract (see `ExitCode`): 0 ok, 1 runtime failure,
2 bad usage, 78 bad config, 130 interrupted. An error is one line on stderr; the
traceback is shown only with `--debug`. Nothing here builds SQL or forks: commands
call the store, the queue, the foreground worker or the daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from . import logs, registry
from .config import Config, load_config
from .durations import format_duration, parse_duration
from .errors import ConfigError, ExitCode, ForkqError, JobNotFound, SchemaError, UsageError
from .models import JobRow, JobState, QueueStats
from .proc import hostname
from .queue import Queue
from .store import SCHEMA_VERSION, Store, open_store

PROG = "forkq"
ERROR_PREFIX = f"{PROG}: error: "
CHECK_TIMEOUT = 5.0  # seconds `forkq check` waits for the database

Command = Callable[[argparse.Namespace], int]


# --- the parser ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting, so a bad
    flag is one line on stderr and exit 2 like every other usage error."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _common_options(*, in_subcommand: bool) -> _Parser:
    """The options every command takes. Inside a sub-command they default to SUPPRESS, so
    a value given before the sub-command name is not overwritten by the sub-parser."""
    none: Any = argparse.SUPPRESS if in_subcommand else None
    parent = _Parser(add_help=False)
    group = parent.add_argument_group("common options")
    group.add_argument(
        "-c", "--config", metavar="FILE", default=none, help="TOML config (default: $FORKQ_CONFIG)"
    )
    group.add_argument(
        "--database",
        metavar="URL",
        default=none,
        help="database URL; wins over the file and $FORKQ_DATABASE_URL",
    )
    group.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS if in_subcommand else False,
        help="debug logging, and tracebacks on errors",
    )
    return parent


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    if value > 2**63 - 1:  # ids and counts are 64-bit in both databases
        raise argparse.ArgumentTypeError(f"must be at most {2**63 - 1}, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _seconds(text: str) -> float:
    """A duration: 30, 1.5, "90s", "5m", "7d"."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _json_payload(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"payload is not valid JSON: {exc}") from None


def _iso_time(text: str) -> datetime:
    """ISO 8601 with or without an offset; a naive time is UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time such as 2030-01-31T09:00:00+09:00, got {text!r}"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _queue_name(text: str) -> str:
    if not text or len(text) > 64:
        raise argparse.ArgumentTypeError("a queue name has 1 to 64 characters")
    return text


def _queue_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected queue names separated by commas")
    return [_queue_name(name) for name in dict.fromkeys(names)]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="A job queue in your own MySQL/MariaDB or SQLite database.",
        parents=[_common_options(in_subcommand=False)],
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = _common_options(in_subcommand=True)

    def command(name: str, func: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[common], help=help_text, description=help_text)
        sub.set_defaults(func=func)
        return sub

    command("run", cmd_run, "run the daemon: the master and its pools of workers")
    _work_parser(command("work", cmd_work, "one worker in the foreground"))
    _enqueue_parser(command("enqueue", cmd_enqueue, "add a job and print its id"))
    _json_flag(command("status", cmd_status, "queues and processes across hosts"))
    _jobs_parser(command("jobs", cmd_jobs, "list jobs, newest first"))
    show = command("show", cmd_show, "every field of one job")
    show.add_argument("id", metavar="ID", type=_positive_int)
    _json_flag(show)
    _retry_parser(command("retry", cmd_retry, "run failed jobs again now"))
    cancel = command("cancel", cmd_cancel, "delete jobs that are not running")
    cancel.add_argument("ids", metavar="ID", nargs="+", type=_positive_int)
    for name, func in (("pause", cmd_pause), ("resume", cmd_resume)):
        sub = command(name, func, f"{name} claiming from a queue, on every host")
        sub.add_argument("queue", metavar="QUEUE", type=_queue_name)
    _purge_parser(command("purge", cmd_purge, "delete finished jobs (done and dead by default)"))
    schema = command("schema", cmd_schema, "print or apply the database schema")
    schema.add_argument("action", choices=("print", "apply"))
    command("check", cmd_check, "check config, handlers, database and schema")
    _json_flag(command("locks", cmd_locks, "the cluster-wide lease locks"))
    _json_flag(command("schedules", cmd_schedules, "the cron schedules and their next runs"))
    alerts = command("alerts", cmd_alerts, "alert channels")
    alerts.add_argument("action", choices=("test",), help="send a test alert to every channel")
    return parser


def _json_flag(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--json", action="store_true", help="print one JSON document")


def _work_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--queues", metavar="A,B", type=_queue_list, help="queues to work (default: every pool)"
    )
    sub.add_argument("--max-jobs", metavar="N", type=_positive_int, help="exit after N jobs")
    sub.add_argument("--burst", action="store_true", help="exit when nothing is ready")


def _enqueue_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("handler", metavar="HANDLER")
    sub.add_argument("payload", metavar="PAYLOAD_JSON", nargs="?", type=_json_payload)
    sub.add_argument("--queue", metavar="Q", type=_queue_name)
    when = sub.add_mutually_exclusive_group()
    when.add_argument("--delay", metavar="S", type=_seconds, default=0.0, help='e.g. 30 or "5m"')
    when.add_argument("--at", metavar="ISO8601", type=_iso_time, help="naive times are UTC")
    sub.add_argument("--priority", metavar="P", type=_int, default=0, help="higher runs first")
    sub.add_argument("--unique-key", metavar="K")
    sub.add_argument("--max-attempts", metavar="N", type=_positive_int)


def _jobs_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--status", choices=[str(s) for s in JobState])
    sub.add_argument("--queue", metavar="Q", type=_queue_name)
    sub.add_argument("--limit", metavar="N", type=_positive_int, default=50)
    _json_flag(sub)


def _retry_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("ids", metavar="ID", nargs="*", type=_positive_int)
    sub.add_argument("--dead", action="store_true", help="every dead job (of --queue)")
    sub.add_argument("--queue", metavar="Q", type=_queue_name, help="with --dead")


def _purge_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--done", action="store_true", help="kept and archived done jobs")
    sub.add_argument("--dead", action="store_true", help="dead jobs")
    sub.add_argument("--older-than", metavar="AGE", type=_seconds, default="7d")
    sub.add_argument("--queue", metavar="Q", type=_queue_name)


# --- main: exceptions become exit codes ----------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv  # known before parsing, so even a usage error can show its trace
    try:
        args = build_parser().parse_args(argv)
        logs.setup(level="debug" if args.debug else "info")
        func: Command = args.func
        return int(func(args))
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # --help, --version, or a command that exits on purpose
        return exc.code if isinstance(exc.code, int) else int(ExitCode.FAILURE if exc.code else 0)
    except ForkqError as exc:
        _print_error(exc, debug)
        return int(exc.exit_code)
    except BrokenPipeError:  # `forkq jobs | head`: the reader left; say nothing more
        with suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.FAILURE)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        detail = " ".join(str(exc).split())
        print(
            f"{PROG}: internal error: {type(exc).__name__}: {detail}"
            + ("" if debug else " (run with --debug for the traceback)"),
            file=sys.stderr,
        )
        return int(ExitCode.FAILURE)


def _print_error(exc: ForkqError, debug: bool) -> None:
    if debug:
        traceback.print_exc()
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not isinstance(exc, ConfigError):  # a config error lists one problem a line
        lines = ["; ".join(lines)]
    for line in lines or [type(exc).__name__]:
        print(ERROR_PREFIX + line, file=sys.stderr)


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


# --- output ----------------------------------------------------------------------------------


def _print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, sort_keys=True, default=str))


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return str(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Aligned plain text: numbers right-aligned, everything else left-aligned."""
    cells = [list(headers)] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(_is_number(row[i]) for row in rows) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            text.rjust(width) if right else text.ljust(width)
            for text, width, right in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _first_line(text: str | None, limit: int = 60) -> str | None:
    if not text:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# --- commands: the daemon and the foreground worker --------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    config = _config(args)
    from .master import run_daemon  # the daemon's modules load only for the daemon

    return run_daemon(config, args.config or os.environ.get("FORKQ_CONFIG") or None)


def cmd_work(args: argparse.Namespace) -> int:
    config = _config(args)
    from .foreground import run_foreground

    return run_foreground(config, args.queues, args.max_jobs, args.burst)


# --- commands: jobs ----------------------------------------------------------------------------


def cmd_enqueue(args: argparse.Namespace) -> int:
    config = _config(args)
    registry.load_modules(config.supervisor.handlers)  # so the handler's default queue applies
    with _store(config) as store:
        job_id = Queue(store=store).enqueue(
            args.handler,
            args.payload,
            queue=args.queue,
            delay=args.delay,
            run_at=args.at,
            priority=args.priority,
            unique_key=args.unique_key,
            max_attempts=args.max_attempts,
        )
    print(job_id)
    return int(ExitCode.OK)


def cmd_jobs(args: argparse.Namespace) -> int:
    config = _config(args)
    with _store(config) as store:
        rows = store.list_jobs(status=args.status, queue=args.queue, limit=args.limit)
    if args.json:
        _print_json([row.as_dict() for row in rows])
    elif not rows:
        print("no jobs")
    else:
        print(_jobs_table(rows))
    return int(ExitCode.OK)


def _jobs_table(rows: Sequence[JobRow]) -> str:
    headers = ("ID", "STATUS", "QUEUE", "HANDLER", "PRI", "ATTEMPTS", "RUN AT", "LAST ERROR")
    return _table(
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
                _first_line(row.last_error),
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
        _print_json(fields)
        return int(ExitCode.OK)
    error = fields.pop("last_error")
    width = max(len(key) for key in fields) + 2
    for key, value in fields.items():
        print(f"{key.ljust(width)}{_cell(value)}")
    if error:
        print("last_error:")
        for line in str(error).splitlines():
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
            print(f"retried {_plural(count, 'dead job')}")
            return int(ExitCode.OK)
        return _each_job(store, args.ids, "retried", lambda ids: store.retry_jobs(ids))


def cmd_cancel(args: argparse.Namespace) -> int:
    config = _config(args)
    with _store(config) as store:
        return _each_job(store, args.ids, "cancelled", lambda ids: store.cancel_jobs(ids))


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
            if row.status == JobState.RUNNING
            else "archived"
        )
        refused.append(f"job {job_id} ({reason})")
    print(f"{verb} {_plural(done, 'job')}")
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
    with _store(config) as store:
        stats = {s.queue: s for s in store.stats()}
        processes = store.list_processes()
        now = store.db_now()  # heartbeat ages on the database clock, as the pruning judges them
    for pool in config.pools:
        stats.setdefault(pool.name, QueueStats(pool.name))
    queues = [stats[name] for name in sorted(stats)]
    beats = [round(max(0.0, now - p.heartbeat_at.timestamp()), 3) for p in processes]
    if args.json:
        _print_json(
            {
                "database": config.database.redacted(),
                "queues": [q.as_dict() for q in queues],
                "processes": [
                    {**p.as_dict(), "heartbeat_age": age}
                    for p, age in zip(processes, beats, strict=True)
                ],
            }
        )
        return int(ExitCode.OK)
    print(_queues_table(queues))
    print()
    if not processes:
        print("no forkq processes are running")
        return int(ExitCode.OK)
    rows = [
        (p.host, p.pid, p.role, p.pool, f"{format_duration(age)} ago")
        for p, age in zip(processes, beats, strict=True)
    ]
    print(_table(("HOST", "PID", "ROLE", "POOL", "HEARTBEAT"), rows))
    return int(ExitCode.OK)


def _queues_table(queues: Sequence[QueueStats]) -> str:
    headers = ("QUEUE", "READY", "DELAYED", "RUNNING", "DEAD", "DONE", "OLDEST", "PAUSED")
    rows = [
        (
            q.queue,
            q.ready,
            q.delayed,
            q.running,
            q.dead,
            q.done,
            format_duration(q.oldest_ready_age) if q.ready else "-",
            q.paused,
        )
        for q in queues
    ]
    return _table(headers, rows)


def cmd_locks(args: argparse.Namespace) -> int:
    config = _config(args)
    with _store(config) as store:
        locks = store.list_locks()
    if args.json:
        _print_json(
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
        print(_table(("NAME", "OWNER", "ACQUIRED", "EXPIRES", "HELD"), rows))
    return int(ExitCode.OK)


def cmd_schedules(args: argparse.Namespace) -> int:
    config = _config(args)
    with _store(config) as store:
        entries = _schedule_entries(config, store)
    if args.json:
        _print_json(
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
        print(_table(headers, [tuple(row) for row in rows]))
    return int(ExitCode.OK)


def _schedule_entries(config: Config, store: Store) -> list[dict[str, Any]]:
    from .schedules import next_run  # the cron machinery loads only when asked for

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
    from .notify import send_test

    results = send_test(config.alerts, hostname())
    if not results:
        raise ForkqError("no alert channel is configured: set [alerts] webhook_url or email_to")
    for result in results:
        status = "ok  " if result.ok else "FAIL"
        print(f"{status}  {result.channel}  {' '.join(result.error.split())}".rstrip())
    failed = [r.channel for r in results if not r.ok]
    if failed:
        raise ForkqError(f"test alert failed on: {', '.join(failed)}")
    return int(ExitCode.OK)


# --- commands: schema and check --------------------------------------------------------------------


def cmd_schema(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.action == "print":
        here = Path(__file__).parent / "store"
        name = "mysql_schema.sql" if config.database.backend == "mysql" else "sqlite_schema.sql"
        sys.stdout.write((here / name).read_text(encoding="utf-8"))
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
            print(f"FAIL  {name.ljust(9)} {line}")
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
    checks.ok("config", f"{config.source}: {_plural(len(config.pools), 'pool')}")
    try:
        modules = registry.load_modules(config.supervisor.handlers)
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
    else:
        checks.ok("schema", f"version {current}")


def _check_result(checks: _Checks) -> int:
    if not checks.failed:
        return int(ExitCode.OK)
    print(f"{ERROR_PREFIX}check failed: {', '.join(checks.failed)}", file=sys.stderr)
    return int(ExitCode.CONFIG if checks.config_failed else ExitCode.FAILURE)
