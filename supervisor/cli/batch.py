"""`forkq batch ID`: where one batch (q.batch()) stands."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from supervisor.cli.common import command_config
from supervisor.cli.databases import database_store, job_ref, several
from supervisor.cli.tables import cell, print_json
from supervisor.errors import ExitCode, JobNotFound
from supervisor.jobref import format_job_ref


def cmd_batch(args: argparse.Namespace) -> int:
    config = command_config(args)
    args.id = job_ref(args, args.id)
    database, batch_id = args.id  # a batch's id is its database's, named as a job's is
    with database_store(config, database) as store:
        status = store.batch_status(batch_id)
    if status is None:
        raise JobNotFound(f"no batch with id {args.id}")
    if args.json:
        labels = {"database": database} if several(config) else {}
        print_json({**status.as_dict(), **labels})
        return int(ExitCode.OK)
    state = "settled" if status.settled_at is not None else "open" if status.sealed else "filling"
    print(f"batch {args.id}: {state}")
    counts = ("total", "pending", "done", "dead", "cancelled")
    print("  ".join(f"{name} {getattr(status, name)}" for name in counts))
    print(f"created     {_when(status.created_at)}")
    print(f"settled     {_when(status.settled_at)}")
    for event, handler in sorted(status.callbacks.items()):
        fired = status.fired.get(event)
        said = (
            "not enqueued"
            if fired is None
            else f"enqueued as job {format_job_ref(database, fired)}"
        )
        print(f"on_{event.ljust(9)}{cell(handler)}: {said}")
    return int(ExitCode.OK)


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
