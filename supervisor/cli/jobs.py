"""`forkq enqueue, jobs, show, retry, cancel, purge, pause, resume`: one job, or one
queue's jobs, at a time."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from supervisor import registry
from supervisor.cli.common import (
    command_config,
    operator_name,
    warn_unrunnable,
    with_same_flags,
)
from supervisor.cli.databases import (
    EachStore,
    by_database,
    database_names,
    database_store,
    job_ref,
    job_refs,
    several,
)
from supervisor.cli.history import extras_json, job_extras, print_extras
from supervisor.cli.tables import WARNING_PREFIX, cell, first_line, plural, print_json, table
from supervisor.config import Config
from supervisor.config.model import HOME_DATABASE
from supervisor.durations import format_duration
from supervisor.errors import ConfigError, ExitCode, ForkqError, JobNotFound, UsageError
from supervisor.escaping import for_terminal, lines_for_terminal
from supervisor.fate import max_attempts_for
from supervisor.jobref import format_job_ref
from supervisor.models import CancelResult, JobRow
from supervisor.queue import Queue
from supervisor.routing import same_database
from supervisor.store import Store
from supervisor.work.command import load_producer_handlers

JOBS_PAGE = 50  # `forkq jobs` lists this many by default; --before ID pages on


def cmd_enqueue(args: argparse.Namespace) -> int:
    config = command_config(args)
    load_producer_handlers(config)  # so a handler's registered queue applies
    # Into the database of its queue (one of [databases.NAME], or the home one).
    [database] = database_names(args, config, args.queue or registry.queue_of(args.handler))
    parents = None
    if args.depends_on is not None:
        parents = same_database(job_refs(args, args.depends_on), database, "--depends-on")
    elif args.on_parent_failure != "cancel":
        raise UsageError("--on-parent-failure goes with --depends-on")
    with database_store(config, database) as store:
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
            depends_on=parents,
            on_parent_failure=args.on_parent_failure,
        )
    ref = format_job_ref(database, job_id)
    print(ref)
    if job_id.conflicted:  # stdout stays the id alone, as before
        print(
            f"unique key {for_terminal(args.unique_key)!r} is held by job {ref}:"
            f" no new job ({args.on_conflict})",
            file=sys.stderr,
        )
    warn_unrunnable(config, args.handler, args.queue, "the job")
    return int(ExitCode.OK)


def cmd_jobs(args: argparse.Namespace) -> int:
    config, limit = command_config(args), args.limit or JOBS_PAGE
    rows: list[tuple[str, JobRow]] = []
    stores, more = EachStore(args, config, args.queue), False  # more: a row past the page
    for database, _, store in stores:
        found = store.list_jobs(args.status, args.queue, limit + 1, args.before)
        more, rows = more or len(found) > limit, rows + [(database, r) for r in found[:limit]]
    labelled = several(config)
    if labelled:  # newest first across the databases (ids are per database)
        rows = sorted(rows, key=lambda pair: pair[1].enqueued_at, reverse=True)[:limit]
    known = _defaults_known(config, [row for _, row in rows])
    if args.json:
        print_json(
            [_labelled(_with_limit(row, known), database, labelled) for database, row in rows]
        )
    elif not rows:
        print("no jobs")
    else:
        print(_jobs_table(rows, labelled, known))
        if more and not labelled:  # there is an older page: say how to see it
            print(with_same_flags(_next_page(args, rows[-1][1].id), args), file=sys.stderr)
    return stores.done()


def _next_page(args: argparse.Namespace, last: int) -> str:
    """`forkq jobs` for the page after this one (--before), with this one's filters."""
    given = [("--status", args.status), ("--queue", args.queue), ("--limit", args.limit)]
    words = [f"{flag} {shlex.quote(str(value))}" for flag, value in given if value]
    return f"older: `forkq jobs {' '.join([*words, f'--before {last}'])}`"


def _defaults_known(config: Config, rows: Sequence[JobRow]) -> bool:
    """Whether the attempts a NULL max_attempts means can be told (its handler's
    default): with the daemon's config file at hand, whose handlers load here. Loaded
    only when a row needs them; else such a row says `default`."""
    if not config.from_file or all(row.max_attempts for row in rows):
        return False
    try:
        load_producer_handlers(config)
    except ConfigError as exc:  # the listing goes on: only the defaults are unknown
        why = f"{str(exc).splitlines()[0]}: a NULL max_attempts shows as default"
        print(WARNING_PREFIX + for_terminal(why), file=sys.stderr)
        return False
    return True


def _max_attempts(row: JobRow, known: bool) -> int | None:
    """The attempts the daemon gives the job (fate.max_attempts_for: the row's, else its
    handler's, else forkq's default); None when that is its handler's and unknown here."""
    return max_attempts_for(row) if known else (row.max_attempts or None)


def _with_limit(row: JobRow, known: bool) -> dict[str, Any]:
    """The row's fields, and `max_attempts_effective` (_max_attempts: null if unknown)."""
    return {**row.as_dict(), "max_attempts_effective": _max_attempts(row, known)}


def _labelled(fields: dict[str, Any], database: str, labelled: bool) -> dict[str, Any]:
    """A JSON object with its `database` (and the job's `ref`) when there are several."""
    if not labelled:
        return fields
    return {"database": database, "ref": format_job_ref(database, fields["id"]), **fields}


def _jobs_table(rows: Sequence[tuple[str, JobRow]], labelled: bool, known: bool) -> str:
    headers = ("ID", "STATUS", "QUEUE", "HANDLER", "PRI", "ATTEMPTS", "RUN AT", "LAST ERROR")
    lines = [
        (
            format_job_ref(database, row.id) if labelled else row.id,
            row.shown_status,
            row.queue,
            row.handler,
            row.priority,
            f"{row.attempts}/{_max_attempts(row, known) or 'default'}",
            row.run_at,
            first_line(row.last_error),
        )
        for database, row in rows
    ]
    if labelled:
        return table(
            ("DATABASE", *headers), [(d, *line) for (d, _), line in zip(rows, lines, strict=True)]
        )
    return table(headers, lines)


def cmd_show(args: argparse.Namespace) -> int:
    config = command_config(args)
    args.id = job_ref(args, args.id)
    database, job_id = args.id
    with database_store(config, database) as store:
        row = store.get_job(job_id)
        result, attempts = job_extras(store, row, job_id)
        # Dependencies (depends_on): the jobs it waits or waited on, and those waiting on it.
        dependencies = _dependencies(store, row.id, database) if row is not None else {}
    if row is None and not result.kept:
        raise JobNotFound(f"no job with id {args.id}")
    if row is None:  # deleted on success; its result is kept
        fields = {"id": job_id, "status": "done (its row deleted; its result kept)"}
    else:
        fields = {**_with_limit(row, _defaults_known(config, [row])), **dependencies}
        if row.batch_id is not None and database != HOME_DATABASE:  # as `forkq batch` takes it
            fields["batch_id"] = format_job_ref(database, row.batch_id)
    fields = _labelled(fields, database, several(config))
    if args.json:
        print_json({**fields, **extras_json(result, attempts)})
        return int(ExitCode.OK)
    error = fields.pop("last_error", None)
    if row is not None:  # one line: what the row says, and what it comes to when NULL
        fields["max_attempts"] = _limit_text(row.max_attempts, fields.pop("max_attempts_effective"))
    width = max(len(key) for key in [*fields, "last_error"]) + 2  # result, last_error below
    for key, value in fields.items():  # an empty value (limit_wait "") is "-", as None is
        print(f"{key.ljust(width)}{cell(None if value == '' else value)}")
    print_extras(result, attempts, width)  # before last_error, which ends the output
    if error:
        print("last_error:")
        for line in lines_for_terminal(str(error)):
            print(f"  {line}")
    else:
        print(f"{'last_error'.ljust(width)}-")
    return int(ExitCode.OK)


def _limit_text(stored: int | None, effective: int | None) -> str:
    """`show`'s max_attempts: the row's, or `-` (NULL) and the default it comes to."""
    if stored:
        return str(stored)
    if effective is None:
        return "- (its handler's default; -c with the daemon's config says which)"
    return f"- (default: {effective})"


def _dependencies(store: Store, job_id: int, database: str) -> dict[str, list[Any]]:
    """`parents` and `dependents` when the job has any (most have none: nothing shown);
    named as jobs of its database are (they are all in it)."""
    found = {"parents": store.parents_of(job_id), "dependents": store.dependents_of(job_id)}
    return {
        key: [i if database == HOME_DATABASE else format_job_ref(database, i) for i in ids]
        for key, ids in found.items()
        if ids
    }


def cmd_retry(args: argparse.Namespace) -> int:
    if args.dead == bool(args.ids):
        raise UsageError("retry takes job ids or --dead, not both and not neither")
    if args.queue and not args.dead:
        raise UsageError("--queue goes with --dead")
    config = command_config(args)
    if args.dead:
        return _retry_dead(args, config)
    done, refused = 0, []
    grouped = by_database(args, config, args.ids)
    stores = EachStore(args, config, names=list(grouped))
    for database, _, store in stores:
        for job_id in grouped[database]:  # job by job: every id not retried is named with why
            if store.retry_jobs([job_id]):
                done += 1
            else:
                ref = format_job_ref(database, job_id)
                refused.append(f"job {ref} ({store.not_retried(job_id)})")
    refused += _not_reached(stores, grouped)
    print(f"retried {plural(done, 'job')}")
    if refused:
        raise JobNotFound(f"not retried: {', '.join(refused)}")
    return int(ExitCode.OK)


def _retry_dead(args: argparse.Namespace, config: Config) -> int:
    """`retry --dead`: every dead job is retried but one whose unique key another job
    holds, which is named with its holder, as `retry ID` does (exit 1)."""
    count, refused, stores = 0, [], EachStore(args, config, args.queue)
    for database, _, store in stores:
        retried, left = store.retry_dead(args.queue)
        count += retried
        refused += [f"job {format_job_ref(database, i)} ({store.not_retried(i)})" for i in left]
    print(f"retried {plural(count, 'dead job')}")
    if refused:
        raise JobNotFound(f"not retried: {', '.join(refused)}")
    return stores.done()


def cmd_cancel(args: argparse.Namespace) -> int:
    """Waiting jobs end cancelled now, running ones within 2 s on whatever host runs them;
    a done, dead or unknown job is named, with exit 1 (SPEC: Job lifecycle). Each line
    says one thing that happened, per database when the config names several."""
    config = command_config(args)
    refused: list[str] = []
    grouped = by_database(args, config, args.ids)
    stores = EachStore(args, config, names=list(grouped))  # one down: the others still done
    for database, _, store in stores:
        found = store.cancel_jobs(grouped[database], by=f"{operator_name()} (forkq cancel)")
        label = f"{database}: " if several(config) else ""
        for line in _cancel_lines(list(found.values())):
            print(label + line)
        refused += [
            f"job {format_job_ref(database, i)} ({r})" for i, r in found.items() if not r.ok
        ]
    refused += _not_reached(stores, grouped)
    if refused:
        raise ForkqError(f"not cancelled: {', '.join(refused)}")
    return int(ExitCode.OK)


def _cancel_lines(results: list[CancelResult]) -> list[str]:
    """`cancelled N jobs` for the waiting ones, `cancelling N running jobs` for those the
    host running them stops; `cancelled 0 jobs` when neither (the refused are the error)."""
    cancelled = results.count(CancelResult.CANCELLED)
    stopping = results.count(CancelResult.CANCELLING)
    lines = [f"cancelled {plural(cancelled, 'job')}"] if cancelled or not stopping else []
    if stopping:
        where = "it runs" if stopping == 1 else "they run"
        lines.append(
            f"cancelling {plural(stopping, 'running job')}: stopped within 2 s where {where}"
        )
    return lines


def _not_reached(stores: EachStore, grouped: dict[str, list[int]]) -> list[str]:
    """The jobs of the databases that did not answer (each warned of on stderr)."""
    return [
        f"job {format_job_ref(database, job_id)} (database {database} did not answer)"
        for database in stores.down
        for job_id in grouped[database]
    ]


def cmd_purge(args: argparse.Namespace) -> int:
    config = command_config(args)
    every = {"done": args.done, "dead": args.dead, "cancelled": args.cancelled}
    statuses = [status for status, wanted in every.items() if wanted]
    age = format_duration(args.older_than) if args.older_than else "0s"
    stores = EachStore(args, config, args.queue)
    for database, _, store in stores:
        counts: dict[str, int] = {}
        for status in statuses or list(every):
            counts[status] = store.purge(status, args.older_than, queue=args.queue)
            if status == "done":
                counts[status] += store.purge_archive(args.older_than, queue=args.queue)
        said = [f"{count} {status}" for status, count in counts.items()]
        summary = " and ".join([", ".join(said[:-1]), said[-1]] if len(said) > 1 else said)
        # "purged 1 dead job", "purged 1 done, 0 dead and 0 cancelled jobs"
        jobs = "job" if list(counts.values()) == [1] else "jobs"
        label = f"{database}: " if several(config) else ""
        print(f"{label}purged {summary} {jobs} finished more than {age} ago")
    return stores.done()


def cmd_pause(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=False)


def _set_paused(args: argparse.Namespace, *, paused: bool) -> int:
    config = command_config(args)
    [database] = database_names(args, config, args.queue)  # the queue's own database
    with database_store(config, database) as store:
        unpaused = not paused and args.queue not in store.paused_queues()
        store.set_paused(args.queue, paused)
    if unpaused:  # a typo resumes nothing: say so
        print(f"queue {for_terminal(args.queue)} was not paused")
    else:
        print(f"queue {for_terminal(args.queue)} {'paused' if paused else 'resumed'}")
    if paused and config.from_file and config.pool(args.queue) is None:  # as enqueue warns
        print(
            f"{WARNING_PREFIX}no pool of {config.source} serves queue"
            f" {for_terminal(args.queue)!r}: paused all the same (a pool may come to serve it)",
            file=sys.stderr,
        )
    return int(ExitCode.OK)
