"""Which databases a command covers when `[databases.NAME]` spread the queues over several:
every one (the home one first), or the one `--database NAME` picks; a job named
`NAME:ID` is asked of its own (jobref.py). With one database nothing here shows."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from supervisor import registry
from supervisor.cli.common import check_database_name, command_store
from supervisor.config import Config
from supervisor.errors import UsageError
from supervisor.jobref import JobRef
from supervisor.store import Store


def several(config: Config) -> bool:
    """The config names more than one database: outputs say which each row is from."""
    return bool(config.databases)


def database_names(args: argparse.Namespace, config: Config, queue: str | None = None) -> list[str]:
    """The databases to ask: `--database NAME`'s, else `queue`'s (when given), else all."""
    picked: str | None = getattr(args, "only_database", None)
    if queue is not None:
        home = config.database_of(queue)
        if picked is not None and picked != home:
            raise UsageError(f"queue {queue!r} is in database {home}, not {picked}")
        return [home]
    if picked is not None:
        return [picked]
    return [name for name, _ in config.every_database()]


def narrowed(config: Config, name: str) -> Config:
    """One database's own config (its URL as `database`); the config itself with one."""
    if not several(config):
        return config
    check_database_name(config, name)
    return config.for_database(name, registry.queue_of)


@contextmanager
def database_store(config: Config, name: str, *, schema: bool = True) -> Iterator[Store]:
    with command_store(narrowed(config, name), schema=schema) as store:
        yield store


def each_store(
    args: argparse.Namespace, config: Config, queue: str | None = None
) -> Iterator[tuple[str, Config, Store]]:
    """(name, its config, its store) for every database asked, each closed after its turn."""
    for name in database_names(args, config, queue):
        here = narrowed(config, name)
        with command_store(here) as store:
            yield name, here, store


def by_database(config: Config, refs: Sequence[JobRef]) -> dict[str, list[int]]:
    """Job ids grouped by database (in the order given), every database checked."""
    grouped: dict[str, list[int]] = {}
    for ref in dict.fromkeys(refs):
        check_database_name(config, ref.database)
        grouped.setdefault(ref.database, []).append(ref.id)
    return grouped
