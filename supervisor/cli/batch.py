"""`forkq batch ID`: where one batch (q.batch()) stands."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from supervisor.cli.common import command_config, command_store
from supervisor.cli.tables import cell, print_json
from supervisor.errors import ExitCode, JobNotFound


def cmd_batch(args: argparse.Namespace) -> int:
    config = command_config(args)
    with command_store(config) as store:
        status = store.batch_status(args.id)
    if status is None:
        raise JobNotFound(f"no batch with id {args.id}")
    if args.json:
        print_json(status.as_dict())
        return int(ExitCode.OK)
    state = "settled" if status.settled_at is not None else "open" if status.sealed else "filling"
    print(f"batch {status.id}: {state}")
    counts = ("total", "pending", "done", "dead", "cancelled")
    print("  ".join(f"{name} {getattr(status, name)}" for name in counts))
    print(f"created     {_when(status.created_at)}")
    print(f"settled     {_when(status.settled_at)}")
    for event, handler in sorted(status.callbacks.items()):
        fired = status.fired.get(event)
        said = f"enqueued as job {fired}" if fired is not None else "not enqueued"
        print(f"on_{event.ljust(9)}{cell(handler)}: {said}")
    return int(ExitCode.OK)


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
