"""Which databases a command covers when `[databases.NAME]` spread the queues over several:
every one (the home one first), or the one `--database NAME` picks; a job named
`NAME:ID` is asked of its own (jobref.py). With one database nothing here shows."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from supervisor import registry
from supervisor.cli.common import check_database_name, command_store
from supervisor.cli.tables import WARNING_PREFIX, plural
from supervisor.config import Config
from supervisor.config.model import HOME_DATABASE
from supervisor.errors import DatabaseError, ExitCode, ForkqError, SchemaError, UsageError
from supervisor.escaping import for_terminal
from supervisor.jobref import JobRef, format_job_ref
from supervisor.status import missing_sqlite, why_down
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
    """One database's own config (its URL as `database`); the config itself with one.
    A name the config lacks is refused even then: `reports:1` is never the home job 1."""
    check_database_name(config, name)
    if not several(config):
        return config
    return config.for_database(name, registry.queue_of)


@contextmanager
def database_store(config: Config, name: str, *, schema: bool = True) -> Iterator[Store]:
    """One database's store; a named database's missing SQLite file is refused, not made."""
    here = narrowed(config, name)
    missing = missing_sqlite(here.database) if name != HOME_DATABASE else None
    if missing is not None:
        raise DatabaseError(f"{missing} ({here.database.redacted()}, [databases.{name}])")
    try:
        with command_store(here, schema=schema) as store:
            yield store
    except (DatabaseError, SchemaError) as exc:
        if not several(config):
            raise
        raise type(exc)(f"{name}: {exc}") from exc  # which of the databases failed


class EachStore:
    """(name, its config, its store) for every database asked, each closed after its
    turn. With several, one that does not answer is said on stderr (`forkq: warning:
    NAME: unreachable: why`) and skipped, so the others are still listed; `done()` then
    ends the command with exit 1. With one database its error is the command's, as ever."""

    def __init__(
        self,
        args: argparse.Namespace,
        config: Config,
        queue: str | None = None,
        names: Sequence[str] | None = None,
    ):
        """`names`: these databases (those of the jobs a command names), else as
        database_names decides."""
        self.config = config
        self.names = list(names) if names is not None else database_names(args, config, queue)
        self.down: list[str] = []

    def __iter__(self) -> Iterator[tuple[str, Config, Store]]:
        for name in self.names:
            here = narrowed(self.config, name)
            with ExitStack() as stack:
                try:
                    store = stack.enter_context(database_store(self.config, name))
                except (DatabaseError, SchemaError) as exc:
                    if not several(self.config):
                        raise
                    self.down.append(name)
                    why = why_down(exc.__cause__ or exc, here.database)  # without "NAME: "
                    print(
                        f"{WARNING_PREFIX}{name}: unreachable: {for_terminal(why)}", file=sys.stderr
                    )
                    continue
                yield name, here, store

    def done(self) -> int:
        """Exit 0, or 1 (ForkqError) when a database did not answer."""
        if self.down:
            raise ForkqError(
                f"{plural(len(self.down), 'database')} did not answer: {', '.join(self.down)}"
            )
        return int(ExitCode.OK)


def job_refs(args: argparse.Namespace, refs: Sequence[JobRef]) -> list[JobRef]:
    """Where each job the command names is: a plain id (parsed with a blank database) in
    the database `--database NAME` picks, else the home one; a `NAME:ID` of another
    database than the one picked is refused, never acted on in either."""
    picked: str | None = getattr(args, "only_database", None)
    found = []
    for ref in refs:
        if ref.database and picked is not None and ref.database != picked:
            shown = format_job_ref(ref.database, ref.id)
            raise UsageError(
                f"job {shown} is in database {ref.database}, not {picked} (--database)"
            )
        found.append(JobRef(ref.database or picked or HOME_DATABASE, ref.id))
    return found


def job_ref(args: argparse.Namespace, ref: JobRef) -> JobRef:
    [found] = job_refs(args, [ref])
    return found


def by_database(
    args: argparse.Namespace, config: Config, refs: Sequence[JobRef]
) -> dict[str, list[int]]:
    """Job ids grouped by database (in the order given), every database checked."""
    grouped: dict[str, list[int]] = {}
    for ref in dict.fromkeys(job_refs(args, refs)):
        check_database_name(config, ref.database)
        grouped.setdefault(ref.database, []).append(ref.id)
    return grouped
