"""Enqueue about twenty demo jobs so a newcomer can watch forkq work.

`make run` does it all; by hand, from the repository root after `make venv`:

    .venv/bin/forkq schema apply -c deploy/forkq.toml   # once: create the tables
    .venv/bin/forkq run -c deploy/forkq.toml            # terminal 1: the daemon
    .venv/bin/python handlers/demo_enqueue.py           # terminal 2: the jobs

Jobs go to every pool of deploy/forkq.toml: some run at once, some a few seconds
later (`delay`), some jump the line (`priority`), one is flaky and succeeds on its
third attempt, and one fails permanently so `forkq jobs --status dead` has something
to show. Run it from the repository root: a relative SQLite URL such as
sqlite:///var/forkq.db is relative to the current directory, for this script as for
the daemon. The commands it prints at the end work as printed, from that directory.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# `python handlers/demo_enqueue.py` puts handlers/ (not the repository) on sys.path;
# add the repository root so `supervisor` and `handlers.demo` import without installing.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import handlers.demo  # noqa: E402, F401 - registers the demo.* handlers and their queues
from supervisor import Queue, registry  # noqa: E402
from supervisor.config import load_config  # noqa: E402
from supervisor.dburl import parse_database_url  # noqa: E402
from supervisor.errors import ForkqError, SchemaError  # noqa: E402

DEFAULT_CONFIG = ROOT / "deploy" / "forkq.toml"


def demo_jobs() -> list[dict[str, Any]]:
    """The jobs to enqueue, as `enqueue` keyword arguments. No queue given: each
    handler's registered queue applies (demo.email -> email, demo.report -> reports)."""
    jobs: list[dict[str, Any]] = [
        {"handler": "demo.echo", "payload": {"msg": f"hello {n}"}} for n in range(1, 5)
    ]
    jobs += [
        {
            "handler": "demo.echo",
            "payload": {"msg": "urgent: runs before the hellos"},
            "priority": 10,
        },
        {"handler": "demo.echo", "payload": {"msg": "from the future"}, "delay": 5},
        {"handler": "demo.echo", "payload": {"msg": "once only"}, "unique_key": "demo-once"},
        {"handler": "demo.echo", "payload": {"msg": "once only"}, "unique_key": "demo-once"},
        {"handler": "demo.sleep", "payload": {"seconds": 0.5}},
        {"handler": "demo.sleep", "payload": {"seconds": 0.5}},
        {"handler": "demo.sleep", "payload": {"seconds": 3}, "delay": 2},
        {"handler": "demo.flaky", "payload": {"fail_times": 2}},
        {"handler": "demo.fail", "payload": {"permanent": True}},
        {"handler": "demo.report", "payload": {"name": "daily", "seconds": 2}},
        {"handler": "demo.report", "payload": {"name": "weekly", "seconds": 3}, "delay": 5},
    ]
    jobs += [
        {"handler": "demo.email", "payload": {"to": f"user{n}@example.com", "subject": "Welcome"}}
        for n in range(1, 5)
    ]
    jobs += [
        {
            "handler": "demo.email",
            "payload": {"to": "vip@example.com", "subject": "Hi"},
            "priority": 5,
        },
        {"handler": "demo.email", "payload": {"to": "later@example.com"}, "delay": 3},
    ]
    return jobs


def describe(job: dict[str, Any]) -> str:
    """One line for the printout: the options that make this job special."""
    registered = registry.get(job["handler"])
    queue = job.get("queue") or (registered.queue if registered else "default")
    options = [f"{key}={job[key]!r}" for key in ("delay", "priority", "unique_key") if key in job]
    line = f"{queue:<8} {job['handler']:<12} {job['payload']!s:<52} {' '.join(options)}"
    return line.rstrip()


def shown_path(path: str | Path) -> str:
    """A path as the user would type it here: relative when under the current directory."""
    absolute = Path(path).absolute()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def forkq_command() -> str:
    """How to run the forkq CLI of this Python from here: `forkq` only if that is on PATH."""
    beside = Path(sys.executable).parent / "forkq"
    on_path = shutil.which("forkq")
    if on_path and beside.exists() and os.path.samefile(on_path, beside):
        return "forkq"
    if beside.exists():
        return shlex.quote(shown_path(beside))
    return f"{shlex.quote(shown_path(sys.executable))} -m supervisor"


def cli_options(args: argparse.Namespace) -> str:
    """`-c CONFIG` (and the --database given, unless it holds a password) for the hints."""
    options = f"-c {shlex.quote(shown_path(args.config))}"
    if args.database and not parse_database_url(args.database).password:
        options += f" --database {shlex.quote(args.database)}"
    return options


def print_hints(args: argparse.Namespace, dead_id: int | None, listen: str) -> None:
    forkq, options = forkq_command(), cli_options(args)
    print("the two 'once only' jobs share one id: a unique_key is enqueued once")
    print("watch them, from this directory:")
    print(f"  {forkq} status {options}")
    print(f"  {forkq} jobs --status dead {options}    # demo.fail, once it has run")
    if dead_id is not None:
        print(f"  {forkq} show {dead_id} {options}")
    print(f"  {forkq} web {options}    # the dashboard on http://{listen}/")
    if args.database and parse_database_url(args.database).password:
        print("  (and add your --database URL: it holds a password, so it is not shown)")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Enqueue demo jobs for the forkq example config.")
    parser.add_argument("-c", "--config", default=str(DEFAULT_CONFIG), help="forkq TOML file")
    parser.add_argument(
        "--database", help="database URL (wins over the file and FORKQ_DATABASE_URL)"
    )
    parser.add_argument(
        "--apply-schema",
        action="store_true",
        help="create or upgrade the forkq tables first (as `forkq schema apply` does)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(args.config, database_url=args.database)
        queue = Queue(config.database)
        try:
            if args.apply_schema:
                queue.store.apply_schema()
            queue.store.require_schema()
            print(f"enqueuing into {config.database.redacted()} (from {config.source})")
            dead_id = None
            for job in demo_jobs():
                job_id = queue.enqueue(**job)
                print(f"  #{job_id:<6} {describe(job)}")
                if job["handler"] == "demo.fail":
                    dead_id = job_id
        finally:
            queue.close()
    except SchemaError as exc:
        print(f"demo_enqueue: {exc}", file=sys.stderr)
        hint = f"{forkq_command()} schema apply {cli_options(args)}"
        print(f"hint: add --apply-schema, or run: {hint}", file=sys.stderr)
        return int(exc.exit_code)
    except ForkqError as exc:
        print(f"demo_enqueue: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    print_hints(args, dead_id, config.web.listen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
