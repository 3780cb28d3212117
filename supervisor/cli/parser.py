"""`forkq`: argparse sub-commands, and the one place exceptions become exit codes.

Every sub-command takes `-c/--config FILE`, `--database URL` and `--debug`, before or after
its name. Exit codes are a contract (`ExitCode`): 0 ok, 1 runtime failure, 2 bad usage, 78
bad config, 130 interrupted. An error is one line on stderr; the traceback only with
`--debug`. What each command does is in commands.py, jobs.py, overview.py and checks.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any, NoReturn

from supervisor import logs, masking
from supervisor.cli.batch import cmd_batch
from supervisor.cli.checks import cmd_alerts, cmd_check, cmd_schema
from supervisor.cli.commands import cmd_run, cmd_web, cmd_work
from supervisor.cli.common import with_same_flags
from supervisor.cli.jobs import (
    cmd_cancel,
    cmd_enqueue,
    cmd_jobs,
    cmd_pause,
    cmd_purge,
    cmd_resume,
    cmd_retry,
    cmd_show,
)
from supervisor.cli.overview import cmd_locks, cmd_schedules, cmd_status
from supervisor.cli.schedule import cmd_schedule, schedule_parser
from supervisor.cli.tables import ERROR_PREFIX, PROG
from supervisor.config import parse_listen
from supervisor.durations import parse_duration
from supervisor.errors import ConfigError, ExitCode, ForkqError, UsageError
from supervisor.escaping import for_terminal
from supervisor.jobref import JobRef, parse_job_ref
from supervisor.models import JobState
from supervisor.status import STATUS_CAP
from supervisor.store import SCHEMA_VERSION

Command = Callable[[argparse.Namespace], int]
DAEMONS: tuple[Command, ...] = (cmd_run, cmd_work, cmd_web)  # they log to stdout (journald)


# --- the parser ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting, so a bad
    flag is one line on stderr and exit 2 like every other usage error."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _common_options(*, in_subcommand: bool) -> _Parser:
    """The options every command takes; SUPPRESS in a sub-command keeps one given before."""
    none: Any = argparse.SUPPRESS if in_subcommand else None
    parent = _Parser(add_help=False)
    group = parent.add_argument_group("common options")
    group.add_argument(
        "-c", "--config", metavar="FILE", default=none, help="TOML config (default: $FORKQ_CONFIG)"
    )
    group.add_argument(
        "--database",
        metavar="URL|NAME",
        default=none,
        help="database URL (wins over the file and $FORKQ_DATABASE_URL), or the NAME of one"
        " of the config's databases ([databases.NAME], or default) to look at it alone",
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
        value = int(text.encode("ascii"))  # ASCII digits: int(text) reads "१२" as 12
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    if value > 2**63 - 1:  # ids and counts are 64-bit in both databases
        raise argparse.ArgumentTypeError(f"must be at most {2**63 - 1}, got {value}")
    return value


def _job_ref(text: str) -> JobRef:
    """A job's id (42) or DATABASE:ID (reports:42). A plain id's database is left blank:
    it is the one `--database NAME` picks, else the home one (databases.job_refs)."""
    if ":" not in text and "-" not in text.strip("- "):  # (1-2, a Django id: parse_job_ref)
        return JobRef("", _positive_int(text))
    try:
        return parse_job_ref(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _schema_version(text: str) -> int:
    """A schema version a database can be at: 1 up to this forkq's own."""
    version = _int(text)
    if version < 1:
        raise argparse.ArgumentTypeError(f"schema versions start at 1, got {version}")
    if version > SCHEMA_VERSION:
        raise argparse.ArgumentTypeError(
            f"schema version {version} is newer than this forkq's ({SCHEMA_VERSION})"
        )
    return version


def _seconds(text: str) -> float:
    """A duration: 30, 1.5, "90s", "5m", "7d"."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _json_payload(text: str) -> Any:
    try:
        return json.loads(sys.stdin.read() if text == "-" else text)  # -: past ARG_MAX's 128 KB
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
    _status_parser(command("status", cmd_status, "queues and processes across hosts"))
    _jobs_parser(command("jobs", cmd_jobs, "list jobs, newest first"))
    show = command("show", cmd_show, "every field of one job")
    show.add_argument("id", metavar="ID", type=_job_ref)
    _json_flag(show)
    batch = command("batch", cmd_batch, "where one batch stands: its jobs and callbacks")
    batch.add_argument("id", metavar="ID", type=_job_ref)
    _json_flag(batch)
    _retry_parser(command("retry", cmd_retry, "run jobs now: ended ones again, delayed early"))
    cancel = command("cancel", cmd_cancel, "cancel waiting or running jobs")
    cancel.add_argument("ids", metavar="ID", nargs="+", type=_job_ref)
    for name, func in (("pause", cmd_pause), ("resume", cmd_resume)):
        sub = command(name, func, f"{name} claiming from a queue, on every host")
        sub.add_argument("queue", metavar="QUEUE", type=_queue_name)
    _purge_parser(command("purge", cmd_purge, "delete done, dead and cancelled jobs"))
    schema = command("schema", cmd_schema, "print or apply the database schema")
    schema.add_argument("action", choices=("print", "apply"))
    schema.add_argument(
        "--upgrade-from",
        metavar="N",
        type=_schema_version,
        help="print only the statements that upgrade schema version N to the latest",
    )
    command("check", cmd_check, "check config, handlers, database and schema")
    _json_flag(command("locks", cmd_locks, "the cluster-wide lease locks"))
    _json_flag(command("schedules", cmd_schedules, "the cron schedules and their next runs"))
    schedule_parser(
        command("schedule", cmd_schedule, "add, pause, resume, remove schedules"), common
    )
    _web_parser(command("web", cmd_web, "serve the web dashboard"))
    alerts = command("alerts", cmd_alerts, "alert channels")
    alerts.add_argument("action", choices=("test",), help="send a test alert to every channel")
    return parser


def _listen(text: str) -> str:
    try:
        parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _web_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--listen",
        metavar="HOST:PORT",
        type=_listen,
        help="default: [web] listen or 127.0.0.1:8740; not loopback only with FORKQ_WEB_TOKEN",
    )
    sub.add_argument(
        "--read-only", action="store_true", help="refuse every action (403) and hide the buttons"
    )


def _json_flag(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--json", action="store_true", help="print one JSON document")


def _status_parser(sub: argparse.ArgumentParser) -> None:
    _json_flag(sub)
    sub.add_argument(
        "--exact",
        action="store_true",
        help=f"count every job (by default counts stop at {STATUS_CAP:,} per queue and status,"
        f" printed {STATUS_CAP}+, so status stays fast on millions of rows)",
    )


def _work_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--queues", metavar="A,B", type=_queue_list,
                     help="queues to work (default: every pool)")  # fmt: skip
    sub.add_argument("--max-jobs", metavar="N", type=_positive_int, help="exit after N jobs")
    sub.add_argument("--burst", action="store_true", help="exit when nothing is ready")


def _enqueue_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("handler", metavar="HANDLER")
    sub.add_argument("payload", metavar="PAYLOAD_JSON", nargs="?", type=_json_payload,
                     help="JSON text; - reads it from standard input")  # fmt: skip
    sub.add_argument("--queue", metavar="Q", type=_queue_name)
    when = sub.add_mutually_exclusive_group()
    when.add_argument("--delay", metavar="S", type=_seconds, default=0.0, help='e.g. 30 or "5m"')
    when.add_argument("--at", metavar="ISO8601", type=_iso_time, help="naive times are UTC")
    sub.add_argument("--priority", metavar="P", type=_int, default=0, help="higher runs first")
    sub.add_argument("--unique-key", metavar="K")
    sub.add_argument("--unique-for", metavar="S", type=_positive_int, help="window: seconds")
    sub.add_argument("--unique-while", choices=("queued", "active", "kept"), help="default kept")
    sub.add_argument("--on-conflict", choices=("skip", "replace", "debounce"), default="skip")
    sub.add_argument("--debounce-max", metavar="S", type=_seconds, help="debounce: at most S late")
    sub.add_argument("--limit-key", metavar="K", help="its bucket of a [limits.NAME] with per_key")
    sub.add_argument("--group-key", metavar="G", help="its tenant in a fair pool (fair = true)")
    sub.add_argument(
        "--tag", metavar="NAME", action="append", dest="tags", help="a tag (repeatable)"
    )
    sub.add_argument("--max-attempts", metavar="N", type=_positive_int)
    sub.add_argument(
        "--depends-on",
        metavar="ID",
        type=_job_ref,
        action="append",
        help="wait until job ID (or DATABASE:ID) is done (repeatable)",
    )
    sub.add_argument(
        "--on-parent-failure",
        choices=("cancel", "continue"),
        default="cancel",
        help="a parent ending dead or cancelled cancels this job (or lets it run)",
    )


def _jobs_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--status", choices=[str(s) for s in JobState])
    sub.add_argument("--queue", metavar="Q", type=_queue_name)
    sub.add_argument("--limit", metavar="N", type=_positive_int, help="default 50")
    sub.add_argument("--before", metavar="ID", type=_positive_int, help="older pages: ids below ID")
    _json_flag(sub)


def _retry_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("ids", metavar="ID", nargs="*", type=_job_ref)
    sub.add_argument("--dead", action="store_true", help="every dead job (of --queue)")
    sub.add_argument("--queue", metavar="Q", type=_queue_name, help="with --dead")


def _purge_parser(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--done", action="store_true", help="kept and archived done jobs")
    sub.add_argument("--dead", action="store_true", help="dead jobs")
    sub.add_argument("--cancelled", action="store_true", help="cancelled jobs")
    sub.add_argument("--older-than", metavar="AGE", type=_seconds, default="7d", help="or 7d")
    sub.add_argument("--queue", metavar="Q", type=_queue_name)


# --- main: exceptions become exit codes ----------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv  # known before parsing, so even a usage error can show its trace
    args = None
    try:
        args = build_parser().parse_args(argv)
        func: Command = args.func  # any other command's stdout is its output: it logs to stderr
        logs.setup(level="debug" if args.debug else "info", to_stderr=func not in DAEMONS)
        return int(func(args))
    except KeyboardInterrupt:
        return 130
    except SystemExit as exc:  # --help, --version, or a command that exits on purpose
        return exc.code if isinstance(exc.code, int) else int(ExitCode.FAILURE if exc.code else 0)
    except ForkqError as exc:
        _print_error(exc, debug, args)
        return int(exc.exit_code)
    except BrokenPipeError:  # `forkq jobs | head`: the reader left; say nothing more
        with suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return int(ExitCode.FAILURE)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        detail = for_terminal(" ".join(str(exc).split()))
        print(
            f"{PROG}: internal error: {type(exc).__name__}: {detail}"
            + ("" if debug else " (run with --debug for the traceback)"),
            file=sys.stderr,
        )
        return int(ExitCode.FAILURE)


def _print_error(exc: ForkqError, debug: bool, args: argparse.Namespace | None) -> None:
    if debug:
        traceback.print_exc()
    lines = [s.strip() for s in with_same_flags(str(exc), args).splitlines() if s.strip()]
    if not isinstance(exc, ConfigError):  # a config error lists one problem a line
        lines = ["; ".join(lines)]
    for line in lines or [type(exc).__name__]:
        print(ERROR_PREFIX + for_terminal(masking.masked(line)), file=sys.stderr)
