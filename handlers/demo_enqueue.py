"""Enqueue about twenty demo jobs so a newcomer can watch forkq work.

    forkq run -c deploy/forkq.toml            # terminal 1: the daemon
    python handlers/demo_enqueue.py           # terminal 2, from the repository root

Jobs go to every pool of deploy/forkq.toml: some run at once, some a few seconds
later (`delay`), some jump the line (`priority`), one is flaky and succeeds on its
third attempt, and one fails permanently so `forkq jobs --status dead` has something
to show. Run it from the repository root: a relative SQLite URL such as
sqlite:///var/forkq.db is relative to the current directory, for this script as for
the daemon.
"""

from __future__ import annotations

import argparse
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
            for job in demo_jobs():
                job_id = queue.enqueue(**job)
                print(f"  #{job_id:<6} {describe(job)}")
        finally:
            queue.close()
    except SchemaError as exc:
        print(f"demo_enqueue: {exc}", file=sys.stderr)
        print("hint: add --apply-schema, or run: forkq schema apply -c CONFIG", file=sys.stderr)
        return int(exc.exit_code)
    except ForkqError as exc:
        print(f"demo_enqueue: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    print("the two 'once only' jobs share one id: a unique_key is enqueued once")
    print("watch: forkq status / forkq jobs --status dead (demo.fail) / forkq show ID")
    return 0


if __name__ == "__main__":
    sys.exit(main())
