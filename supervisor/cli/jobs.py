"""`forkq enqueue, jobs, show, retry, cancel, purge, pause, resume`: one job, or one
queue's jobs, at a time."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from supervisor import registry
from supervisor.cli.common import command_config, command_store, operator_name
from supervisor.cli.history import extras_json, job_extras, print_extras
from supervisor.cli.tables import WARNING_PREFIX, cell, first_line, plural, print_json, table
from supervisor.config import Config
from supervisor.durations import format_duration
from supervisor.errors import ExitCode, ForkqError, JobNotFound, UsageError
from supervisor.escaping import for_terminal, lines_for_terminal
from supervisor.models import CancelResult, JobRow
from supervisor.queue import Queue
from supervisor.store import Store
from supervisor.work.command import load_handlers


def cmd_enqueue(args: argparse.Namespace) -> int:
    config = command_config(args)
    # So the handler's default queue applies.
    load_handlers(config)
    with command_store(config) as store:
        job_id = Queue(store=store).enqueue(
            args.handler,
            args.payload,
            queue=args.queue,
            delay=args.delay,
            run_at=args.at,
            priority=args.priority,
            unique_key=args.unique_key,
            limit_key=args.limit_key,
            group_key=args.group_key,
            tags=args.tags,
            max_attempts=args.max_attempts,
            unique_for=args.unique_for,
            unique_while=args.unique_while,
            on_conflict=args.on_conflict,
            debounce_max=args.debounce_max,
            depends_on=args.depends_on,
            on_parent_failure=args.on_parent_failure,
        )
    print(job_id)
    if job_id.conflicted:  # stdout stays the id alone, as before
        print(
            f"unique key {for_terminal(args.unique_key)!r} is held by job {job_id}:"
            f" no new job ({args.on_conflict})",
            file=sys.stderr,
        )
    if config.from_file:  # with the daemon's config at hand: say when the job cannot run
        for warning in _enqueue_warnings(config, args.handler, args.queue):
            print(WARNING_PREFIX + for_terminal(warning), file=sys.stderr)
    return int(ExitCode.OK)


def _enqueue_warnings(config: Config, name: str, queue: str | None) -> list[str]:
    """Why a job just enqueued may never run, as the config says (it is enqueued anyway:
    the daemon's config may differ from this one)."""
    registered = registry.get(name)
    queue = queue or (registered.queue if registered else "default")
    warnings = []
    if registered is None:
        warnings.append(
            f"no handler module or [commands] table of {config.source} registers {name!r}:"
            " a worker ends the job dead (unknown handler)"
        )
    if config.pool(queue) is None:
        warnings.append(
            f"no pool of {config.source} serves queue {queue!r}: the job waits until a"
            f" [pools.{queue}] works it"
        )
    return warnings


def cmd_jobs(args: argparse.Namespace) -> int:
    config = command_config(args)
    with command_store(config) as store:
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
                row.shown_status,
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
    config = command_config(args)
    with command_store(config) as store:
        row = store.get_job(args.id)
        result, attempts = job_extras(store, row, args.id)
        # Dependencies (depends_on): the jobs it waits or waited on, and those waiting on it.
        dependencies = _dependencies(store, row.id) if row is not None else {}
    if row is None and not result.kept:
        raise JobNotFound(f"no job with id {args.id}")
    if row is None:  # deleted on success; its result is kept
        fields = {"id": args.id, "status": "done (its row deleted; its result kept)"}
    else:
        fields = {**row.as_dict(), **dependencies}
    if args.json:
        print_json({**fields, **extras_json(result, attempts)})
        return int(ExitCode.OK)
    error = fields.pop("last_error", None)
    width = max(len(key) for key in fields) + 2
    for key, value in fields.items():
        print(f"{key.ljust(width)}{cell(value)}")
    print_extras(result, attempts, width)  # before last_error, which ends the output
    if error:
        print("last_error:")
        for line in lines_for_terminal(str(error)):
            print(f"  {line}")
    else:
        print(f"{'last_error'.ljust(width)}-")
    return int(ExitCode.OK)


def _dependencies(store: Store, job_id: int) -> dict[str, list[int]]:
    """`parents` and `dependents` when the job has any (most have none: nothing shown)."""
    found = {"parents": store.parents_of(job_id), "dependents": store.dependents_of(job_id)}
    return {key: ids for key, ids in found.items() if ids}


def cmd_retry(args: argparse.Namespace) -> int:
    if args.dead == bool(args.ids):
        raise UsageError("retry takes job ids or --dead, not both and not neither")
    if args.queue and not args.dead:
        raise UsageError("--queue goes with --dead")
    config = command_config(args)
    with command_store(config) as store:
        if args.dead:
            count = store.retry_dead(args.queue)
            print(f"retried {plural(count, 'dead job')}")
            return int(ExitCode.OK)
        return _each_job(store, args.ids, "retried", lambda ids: store.retry_jobs(ids))


def cmd_cancel(args: argparse.Namespace) -> int:
    """Waiting jobs end cancelled now, running ones within 2 s on whatever host runs them;
    a done, dead or unknown job is named, with exit 1 (SPEC: Job lifecycle)."""
    config = command_config(args)
    with command_store(config) as store:
        results = store.cancel_jobs(args.ids, by=f"{operator_name()} (forkq cancel)")
    cancelled = sum(1 for r in results.values() if r == CancelResult.CANCELLED)
    stopping = sum(1 for r in results.values() if r == CancelResult.CANCELLING)
    print(f"cancelled {plural(cancelled, 'job')}")
    if stopping:
        print(f"cancelling {plural(stopping, 'running job')}: stopped within 2 s where they run")
    refused = [f"job {i} ({r})" for i, r in results.items() if not r.ok]
    if refused:
        raise ForkqError(f"not cancelled: {', '.join(refused)}")
    return int(ExitCode.OK)


def _each_job(
    store: Store, ids: Sequence[int], verb: str, operation: Callable[[list[int]], int]
) -> int:
    """Apply `operation` job by job, so every id that was not changed is named with why."""
    done, refused = 0, []
    for job_id in dict.fromkeys(ids):
        if operation([job_id]):
            done += 1
            continue
        refused.append(f"job {job_id} ({store.not_retried(job_id)})")
    print(f"{verb} {plural(done, 'job')}")
    if refused:
        raise JobNotFound(f"not {verb}: {', '.join(refused)}")
    return int(ExitCode.OK)


def cmd_purge(args: argparse.Namespace) -> int:
    config = command_config(args)
    statuses = [s for s, wanted in (("done", args.done), ("dead", args.dead)) if wanted]
    counts: dict[str, int] = {}
    with command_store(config) as store:
        for status in statuses or ["done", "dead"]:
            counts[status] = store.purge(status, args.older_than, queue=args.queue)
            if status == "done":
                counts[status] += store.purge_archive(args.older_than, queue=args.queue)
    summary = " and ".join(f"{count} {status}" for status, count in counts.items())
    age = format_duration(args.older_than) if args.older_than else "0s"
    print(f"purged {summary} jobs finished more than {age} ago")
    return int(ExitCode.OK)


def cmd_pause(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=False)


def _set_paused(args: argparse.Namespace, *, paused: bool) -> int:
    config = command_config(args)
    with command_store(config) as store:
        store.set_paused(args.queue, paused)
    print(f"queue {args.queue} {'paused' if paused else 'resumed'}")
    return int(ExitCode.OK)
