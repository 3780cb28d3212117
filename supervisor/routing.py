"""Queues spread over several databases (`[databases.NAME]`, SPEC "Outgrowing one
database"): the producer's router, what `Queue.from_config` returns when a config names
more than one database.

One `Queue` per database, opened on first use; a job goes to the database holding its
queue (the handler's registered queue when none is given, as `Queue.enqueue` decides).
Job ids are per database: what it returns is an `Enqueued` whose `database` says where
(`.ref` is `reports:42`), and get / result / wait / cancel take an int (the home
database), an `Enqueued`, a `JobRef` or its text (`"reports:42"`). Nothing spans two
databases: a job's parents, a chain, a group and a batch live in one.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from supervisor import registry
from supervisor.batches import Batch
from supervisor.building import encode_payload
from supervisor.config import Config
from supervisor.config.model import HOME_DATABASE
from supervisor.dburl import DatabaseURL
from supervisor.errors import UsageError
from supervisor.jobref import JobRef, parse_job_ref
from supervisor.lock import Lock
from supervisor.models import BatchStatus, Enqueued, JobRow, NewJob
from supervisor.results import JobResult
from supervisor.store import Store
from supervisor.workflow import Group, JobSpec, as_spec

if TYPE_CHECKING:
    from supervisor.queue import Queue

Ref = int | str | JobRef  # an Enqueued is an int that knows its database


def job_ref(ref: Ref) -> JobRef:
    """Where `ref` is: an Enqueued's own database, a plain int's the home one."""
    if isinstance(ref, JobRef):
        return ref
    if isinstance(ref, Enqueued):
        return JobRef(ref.database, int(ref))
    if isinstance(ref, int) and not isinstance(ref, bool):
        return JobRef(HOME_DATABASE, ref)
    if isinstance(ref, str):
        try:
            return parse_job_ref(ref)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    raise UsageError(f"expected a job id (42) or DATABASE:ID (reports:42), not {ref!r}")


class Router:
    """`Queue.from_config(path)` with several databases: Queue's methods, routed by queue."""

    def __init__(self, config: Config, queue_class: type[Queue], *, wake: bool = True) -> None:
        """`queue_class`: Queue (passed in: queue.py's from_config makes Routers)."""
        self.config = config
        self.queue_class = queue_class
        self.wake = wake
        self.queues: dict[str, Queue] = {}

    def on(self, database: str) -> Queue:
        """The Queue of one database (opened now if it is not yet)."""
        if database not in self.queues:
            try:
                url = self.config.url_of(database)
            except KeyError:
                names = ", ".join(name for name, _ in self.config.every_database())
                raise UsageError(f"no database named {database!r} (there are: {names})") from None
            self.queues[database] = self.queue_class(url, wake=self.wake)
        return self.queues[database]

    def database_of_job(self, job: NewJob) -> str:
        return self.config.database_of(job.queue)

    def database_for(self, handler: str, queue: str | None = None) -> str:
        """Where a job of `handler` goes: its queue's database (the handler's registered
        queue when none is named, as Queue.enqueue decides)."""
        return self.config.database_of(queue or registry.queue_of(handler))

    # --- enqueueing ----------------------------------------------------------------------

    def enqueue(
        self,
        handler: str,
        payload: Any = None,
        *,
        connection: Any = None,
        depends_on: Sequence[Ref] | None = None,
        **options: Any,
    ) -> Enqueued:
        """Queue.enqueue, in the database of the job's queue. `connection` must be one to
        that database; `depends_on` jobs must be in it too."""
        name = self.database_for(handler, options.get("queue"))
        target = self.on(name)
        if connection is not None:
            check_connection(connection, target.store, self.config.url_of(name), name)
        parents = None if depends_on is None else same_database(depends_on, name, "depends_on")
        job_id = target.enqueue(
            handler, payload, connection=connection, depends_on=parents, **options
        )
        return Enqueued(job_id, job_id.conflicted, name)

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
        """Queue.enqueue_many: one transaction per database (all of one database's jobs
        or none of them; jobs of two databases are two transactions). Ids in order."""
        built = self.on(HOME_DATABASE).build_many(jobs)
        return self.insert_built(built)

    def insert_built(self, built: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        by_database: dict[str, list[int]] = {}
        for index, job in enumerate(built):
            by_database.setdefault(self.database_of_job(job), []).append(index)
        if connection is not None and len(by_database) > 1:
            raise UsageError(
                f"jobs of {' and '.join(sorted(by_database))} cannot be written on one"
                " connection: it is to one database"
            )
        found: list[Enqueued | None] = [None] * len(built)
        for name, indexes in by_database.items():
            target = self.on(name)
            if connection is not None:
                check_connection(connection, target.store, self.config.url_of(name), name)
            try:
                ids = target.insert_built([built[i] for i in indexes], connection)
            except Exception as exc:
                _tell_written(exc, found, name)
                raise
            for index, job_id in zip(indexes, ids, strict=True):
                found[index] = Enqueued(job_id, job_id.conflicted, name)
        return [job_id for job_id in found if job_id is not None]

    @staticmethod
    def job(handler: str, payload: Any = None, **options: Any) -> JobSpec:
        """A job for chain() and group(), as Queue.job."""
        return JobSpec(handler, payload, options)

    def chain(self, specs: Sequence[JobSpec | Mapping[str, Any]]) -> list[Enqueued]:
        """Queue.chain, in the one database every job's queue is in."""
        return self.enqueue_specs([as_spec(s) for s in specs], chained=True)

    def group(self, specs: Sequence[JobSpec | Mapping[str, Any]]) -> Group:
        """Queue.group, in the one database every job's queue is in; `.then(spec)` too."""
        return Group(self, self.enqueue_specs([as_spec(s) for s in specs], chained=False))

    def enqueue_specs(self, specs: Sequence[JobSpec], chained: bool) -> list[Enqueued]:
        if not specs:
            return []
        names = {self.database_for(s.handler, s.options.get("queue")) for s in specs}
        if len(names) > 1:
            raise UsageError(
                f"these jobs are in {' and '.join(sorted(names))}: a chain or a group lives in"
                " one database (a job's parents must be in its database)"
            )
        [name] = names
        local = [_with_parents(s, name) for s in specs]
        ids = self.on(name).enqueue_specs(local, chained)
        return [Enqueued(job_id, False, name) for job_id in ids]

    def batch(
        self,
        *,
        on_success: str | None = None,
        on_complete: str | None = None,
        on_dead: str | None = None,
        payload: Any = None,
        connection: Any = None,
    ) -> Batch:
        """Queue.batch in the database of its callbacks' queues; its jobs must be there too."""
        callbacks = {"success": on_success, "complete": on_complete, "dead": on_dead}
        names = {self.database_for(h) for h in callbacks.values() if h is not None}
        if len(names) > 1:
            raise UsageError(
                f"the callbacks' queues are in {' and '.join(sorted(names))}: a batch lives in"
                " one database"
            )
        name = names.pop() if names else HOME_DATABASE
        if connection is not None:
            check_connection(connection, self.on(name).store, self.config.url_of(name), name)
        producer = OneDatabase(self, name)
        return RoutedBatch(producer, callbacks, encode_payload(payload), connection)

    # --- one job, by reference -----------------------------------------------------------

    # What is read back names its jobs as Enqueued of their database, so passing an id
    # on (`q.cancel(q.get(ref).id)`) never means the home job with that number.

    def get(self, ref: Ref) -> JobRow | None:
        where = job_ref(ref)
        row = self.on(where.database).get(where.id)
        if row is None:
            return None
        batch = None if row.batch_id is None else Enqueued(row.batch_id, False, where.database)
        return replace(row, id=Enqueued(row.id, False, where.database), batch_id=batch)

    def result(self, ref: Ref) -> JobResult:
        where = job_ref(ref)
        found = self.on(where.database).result(where.id)
        return replace(found, job_id=Enqueued(found.job_id, False, where.database))

    def wait(self, ref: Ref, timeout: float | None = None) -> JobResult:
        where = job_ref(ref)
        found = self.on(where.database).wait(where.id, timeout)
        return replace(found, job_id=Enqueued(found.job_id, False, where.database))

    def cancel(self, ref: Ref, by: str | None = None) -> bool:
        where = job_ref(ref)
        return self.on(where.database).cancel(where.id, by)

    def batch_status(self, ref: Ref) -> BatchStatus | None:
        """A batch's id is its database's, named as a job is (`reports:7`)."""
        where = job_ref(ref)
        found = self.on(where.database).batch_status(where.id)
        if found is None:
            return None
        fired: dict[str, int] = {
            e: Enqueued(i, False, where.database) for e, i in found.fired.items()
        }
        return replace(found, id=Enqueued(found.id, False, where.database), fired=fired)

    def lock(self, name: str, ttl: float = 60.0, *, queue: str | None = None) -> Lock:
        """A lease in the database of `queue` (the home database without one)."""
        database = HOME_DATABASE if queue is None else self.config.database_of(queue)
        return self.on(database).lock(name, ttl)

    def close(self) -> None:
        for queue in self.queues.values():
            queue.close()
        self.queues.clear()


class RoutedBatch(Batch):
    """A Batch whose id knows its database (an Enqueued: `.ref` is `reports:7`), so
    `batch_status(batch.id)` asks that database, not the home one's batch 7."""

    producer: OneDatabase

    def __enter__(self) -> RoutedBatch:
        super().__enter__()
        if self.id is not None:
            self.id = Enqueued(self.id, False, self.producer.name)
        return self


class OneDatabase:
    """What a Batch writes through: one database's Queue, refusing a job of another."""

    def __init__(self, router: Router, name: str) -> None:
        self.router = router
        self.name = name
        self.store: Store = router.on(name).store

    def build_one(self, handler: str, payload: Any, options: Mapping[str, Any]) -> NewJob:
        return self._here([self.router.on(self.name).build_one(handler, payload, options)])[0]

    def build_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[NewJob]:
        return self._here(self.router.on(self.name).build_many(jobs))

    def insert_built(self, built: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        ids = self.router.on(self.name).insert_built(built, connection)
        return [Enqueued(job_id, job_id.conflicted, self.name) for job_id in ids]

    def _here(self, built: list[NewJob]) -> list[NewJob]:
        for job in built:
            there = self.router.database_of_job(job)
            if there != self.name:
                raise UsageError(
                    f"queue {job.queue!r} is in database {there}, this batch in {self.name}:"
                    " a batch lives in one database"
                )
        return built


def same_database(refs: Sequence[Ref], database: str, what: str) -> list[int]:
    """The ids of `refs`, all in `database` (a plain int names a home job), else UsageError."""
    if isinstance(refs, str | bytes) or not isinstance(refs, Sequence):
        raise UsageError(f"{what} must be a list of job ids")
    ids = []
    for ref in refs:
        where = job_ref(ref)
        if where.database != database:
            raise UsageError(
                f"{what}: job {where} is in database {where.database}, this job in {database}:"
                " a job's parents must be in its database"
            )
        ids.append(where.id)
    return ids


def _with_parents(spec: JobSpec, database: str) -> JobSpec:
    parents = spec.options.get("depends_on")
    if parents is None:
        return spec
    options = {**spec.options, "depends_on": same_database(parents, database, "depends_on")}
    return JobSpec(spec.handler, spec.payload, options)


def check_connection(connection: Any, store: Store, url: DatabaseURL, name: str) -> None:
    """Refuse a caller's connection that is not to database `name`: its job would be
    written where no daemon of its queue looks."""
    if isinstance(connection, sqlite3.Connection):
        kind = "sqlite"
    elif hasattr(connection, "port") and hasattr(connection, "cursor"):  # PyMySQL's
        kind = "mysql"
    else:
        raise UsageError(
            f"connection=: cannot tell which database this connection is to; jobs of database"
            f" {name} need a PyMySQL or sqlite3 connection to {url.redacted()}"
        )
    where = f"this job's queue is in database {name} ({url.redacted()})"
    if kind != url.backend:
        raise UsageError(f"connection= is a {kind} connection, but {where}")
    seen = store.connection_database(connection)
    if kind == "sqlite":
        same = os.path.realpath(seen or ":memory:") == os.path.realpath(url.path)
    else:
        same = any(_same_server(connection, seen, each) for each in (url.nodes or (url,)))
    if not same:
        raise UsageError(
            f"connection= is to {seen or 'no database'}, but {where}: enqueue on a"
            " connection to that database"
        )


def _same_server(connection: Any, database: str | None, url: DatabaseURL) -> bool:
    if database != url.database or url.unix_socket:  # a socket's server: the name must do
        return database == url.database
    loopback = ("127.0.0.1", "::1", "localhost")
    host = str(getattr(connection, "host", ""))
    same_host = host == url.host or (host in loopback and url.host in loopback)
    return same_host and int(connection.port) == url.port


def _tell_written(exc: Exception, found: list[Enqueued | None], failed: str) -> None:
    """A database failed after others took their jobs (each its own transaction): the
    error keeps its type and says so, and `exc.enqueued` holds what was written (None in
    the places of the jobs that were not), so a caller retrying can leave those out."""
    written = [job_id for job_id in found if job_id is not None]
    if not written:
        return
    exc.enqueued = list(found)  # type: ignore[attr-defined]
    where = sorted({job_id.database for job_id in written})
    exc.add_note(
        f"{len(written)} of these jobs were written before database {failed} failed"
        f" (to {', '.join(where)}; their ids in this error's .enqueued), the others not"
    )
