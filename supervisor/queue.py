"""The producer API: `Queue(url).enqueue(...)`, batches, transactional enqueue, and locks."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from supervisor.batches import Batch
from supervisor.building import ENQUEUE_KEYS, build_job, build_many, encode_payload, with_tags
from supervisor.config import Config, load_config
from supervisor.dburl import DatabaseURL
from supervisor.errors import UsageError
from supervisor.lock import Lock
from supervisor.models import BatchStatus, Enqueued, JobRow, NewJob
from supervisor.results import JobResult, read_result, wait_result
from supervisor.routing import Router
from supervisor.store import Store, open_store
from supervisor.unique import UNIQUE_KEYS, with_unique
from supervisor.wake import Nudger
from supervisor.workflow import Group, JobSpec, as_spec, checked_parents


class Queue:
    """A handle on the queue tables of one database. Cheap; opens its connection lazily."""

    def __init__(
        self,
        url: str | DatabaseURL | Sequence[str] | None = None,
        *,
        store: Store | None = None,
        wake: bool = True,
    ) -> None:
        """`url`: one database URL, or a Galera cluster's nodes as a list of them (in
        order of preference: the first Synced node that answers takes the writes).
        `wake=False` (or FORKQ_WAKE=0): no datagram to local daemons (see wake.py)."""
        if store is None:
            if url is None:
                raise UsageError("Queue needs a database URL")
            store = open_store(url)
        self.store = store
        self.nudger = Nudger.for_store(store) if wake else None

    @classmethod
    def from_config(
        cls, config: str | os.PathLike[str] | Config, *, wake: bool = True
    ) -> Queue | Router:
        """The producer for a config file (or a loaded Config): a Queue on `[database]`,
        or, when `[databases.NAME]` spread the queues over several, a Router
        (routing.py) that writes each job where its queue lives."""
        if not isinstance(config, Config):
            config = load_config(config)
        if not config.databases:
            return cls(config.database, wake=wake)
        return Router(config, cls, wake=wake)

    def enqueue(
        self,
        handler: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        delay: float = 0.0,
        run_at: datetime | None = None,
        priority: int = 0,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        limit_key: str | None = None,
        group_key: str | None = None,
        connection: Any = None,
        tags: Sequence[str] | None = None,
        unique_for: int | None = None,
        unique_while: str | None = None,
        on_conflict: str = "skip",
        debounce_max: float | None = None,
        depends_on: Sequence[int] | None = None,
        on_parent_failure: str = "cancel",
    ) -> Enqueued:
        """Add one job and return its id (the existing job's id when `unique_key` is taken).

        The id is an `Enqueued` (an int): `conflicted` says the key was held, `existing`
        by which job. `unique_for` (seconds: a window), `unique_while` (queued, active,
        kept) and `on_conflict` (skip, replace, debounce with `debounce_max`): README
        "Unique jobs".

        With `connection` (a PyMySQL or sqlite3 connection of the caller's), the row is
        written inside the caller's open transaction: it exists iff the caller commits
        (local daemons are nudged before: the poll finds it within `poll_interval`).

        `limit_key`: the job's bucket in a `[limits.NAME]` with `per_key` (SPEC "Flow
        control"). `group_key`: its tenant in a fair pool (else its limit_key). `tags` (up
        to 20 names of 1 to 64 characters): the dashboard's `tag:NAME` search. With
        `depends_on` (job ids) it waits until they are done (`_enqueue_waiting`).
        """
        job = build_job(handler, payload, queue, delay, run_at, priority, unique_key, max_attempts,
                        limit_key, group_key)  # fmt: skip
        job = with_unique(with_tags(job, tags), unique_for, unique_while, on_conflict, debounce_max)
        if depends_on is not None:
            return Enqueued(self._enqueue_waiting(job, depends_on, on_parent_failure, connection))
        if on_parent_failure != "cancel":  # a rule with no parent to apply it to: a slip
            raise UsageError("on_parent_failure goes with depends_on")
        on = connection
        job_id = self.store.enqueue(job) if on is None else self.store.insert_on(on, job)
        if self.nudger is not None:
            self.nudger.nudge_jobs((job,))
        return job_id

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
        """Add many jobs in one transaction (one round trip per 1,000 rows on MariaDB)."""
        return self.insert_built(build_many(jobs))

    def build_one(self, handler: str, payload: Any, options: Mapping[str, Any]) -> NewJob:
        """One job checked as enqueue checks it (options: enqueue's keywords)."""
        unknown = set(options) - ENQUEUE_KEYS
        if unknown:
            raise UsageError(f"enqueue: unknown keys {sorted(unknown)}")
        return build_many([{**options, "handler": handler, "payload": payload}])[0]

    def build_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[NewJob]:
        return build_many(jobs)

    def insert_built(self, built: Sequence[NewJob], connection: Any = None) -> list[Enqueued]:
        """Insert jobs already built and checked (build_job): in one transaction of the
        store's, or in the caller's on `connection`; local daemons nudged."""
        if connection is not None:
            ids = [self.store.insert_on(connection, job) for job in built]
        else:
            ids = self.store.insert_many(built)
        if self.nudger is not None:
            self.nudger.nudge_jobs(built)
        return ids

    def _enqueue_waiting(
        self, job: NewJob, depends_on: Any, on_parent_failure: str, connection: Any
    ) -> int:
        """The job waits (status `waiting`) until every parent is done; one ending dead or
        cancelled cancels it, unless `on_parent_failure` is "continue" (then that parent
        counts as done). See SPEC "Composing jobs"."""
        parents = checked_parents(depends_on, on_parent_failure)
        if job.unique_key is not None:
            raise UsageError("depends_on does not combine with unique_key (not yet)")
        if connection is not None:
            raise UsageError("depends_on does not combine with connection= (not yet)")
        job_id = self.store.enqueue_dependent(job, parents, on_parent_failure)
        if self.nudger is not None:
            self.nudger.nudge_jobs((job,))
        return job_id

    @staticmethod
    def job(handler: str, payload: Any = None, **options: Any) -> JobSpec:
        """A job for chain() and group(): enqueue's arguments, nothing written yet."""
        return JobSpec(handler, payload, options)

    def chain(self, specs: Sequence[JobSpec | Mapping[str, Any]]) -> list[int]:
        """Enqueue jobs that run one after another, in one transaction: each waits on the
        one before it (and on its own depends_on). Their ids, in order."""
        return self.enqueue_specs([as_spec(s) for s in specs], chained=True)

    def group(self, specs: Sequence[JobSpec | Mapping[str, Any]]) -> Group:
        """Enqueue jobs together, in one transaction; `.then(spec)` on what this returns
        enqueues a job that waits on all of them."""
        return Group(self, self.enqueue_specs([as_spec(s) for s in specs], chained=False))

    def enqueue_specs(self, specs: Sequence[JobSpec], chained: bool) -> list[int]:
        """Specs in one transaction; with `chained` each waits on the one before it."""
        built = []
        for spec in specs:
            options = dict(spec.options)
            parents = checked_parents(
                options.pop("depends_on", None), options.get("on_parent_failure", "cancel")
            )
            on_failure = options.pop("on_parent_failure", "cancel")
            unique = {k for k in UNIQUE_KEYS | {"unique_key"} if options.get(k) is not None}
            if unique - {"on_conflict"} or options.get("on_conflict", "skip") != "skip":
                raise UsageError(
                    "chain() and group() jobs are enqueued with depends_on, which does not"
                    f" combine with unique_key or its options: {sorted(unique)}"
                )
            built.append((self.build_one(spec.handler, spec.payload, options), parents, on_failure))
        ids = self.store.enqueue_dependents(built, chained=chained) if built else []
        if self.nudger is not None and built:
            self.nudger.nudge_jobs([job for job, _, _ in built])
        return ids

    def batch(
        self,
        *,
        on_success: str | None = None,
        on_complete: str | None = None,
        on_dead: str | None = None,
        payload: Any = None,
        connection: Any = None,
    ) -> Batch:
        """`with q.batch(on_complete="report.send") as b: b.enqueue(...)`: callbacks enqueued
        once when every job of the batch has ended (README "Batches")."""
        callbacks = {"success": on_success, "complete": on_complete, "dead": on_dead}
        return Batch(self, callbacks, encode_payload(payload), connection)

    def batch_status(self, batch_id: int) -> BatchStatus | None:
        """Where batch `batch_id` stands (pending, done, dead, ...), or None if there is none."""
        return self.store.batch_status(_an_id("batch", batch_id))

    def get(self, job_id: int) -> JobRow | None:
        return self.store.get_job(_an_id("job", job_id))

    def result(self, job_id: int) -> JobResult:
        """Where the job stands and, once done, what its handler returned (kept when the
        handler or its pool says `keep_result`): `.state`, `.finished`, `.kept`, `.value`."""
        return read_result(self.store, _an_id("job", job_id))

    def wait(self, job_id: int, timeout: float | None = None) -> JobResult:
        """Wait for the job to end and return its result; TimeoutError after `timeout`
        seconds. Woken by the worker that ends it on this host, else a backed-off poll."""
        return wait_result(self.store, _an_id("job", job_id), timeout)

    def cancel(self, job_id: int, by: str | None = None) -> bool:
        """Cancel one job: True if it is cancelled (it was waiting) or being cancelled (it
        runs: the host running it kills it within 2 s); False if it finished, is dead,
        was cancelled already or does not exist. `by` goes into its last_error."""
        job_id = _an_id("job", job_id)
        who = by or f"Queue.cancel on {socket.gethostname()} pid {os.getpid()}"
        return self.store.cancel_jobs([job_id], who)[job_id].ok

    def lock(self, name: str, ttl: float = 60.0) -> Lock:
        """A cluster-wide lease: `with q.lock("export", ttl=300) as lock: ...; lock.renew()`."""
        return Lock(self.store, name, ttl)

    def close(self) -> None:
        self.store.close()


def _an_id(kind: str, value: Any) -> int:
    """One job's (or batch's) id as the store takes it: an int, or its digits as text. A
    list or a name is a UsageError that says so, not a TypeError from deep in the store."""
    if not isinstance(value, bool) and isinstance(value, int) and value > 0:
        return value
    digits = isinstance(value, str) and value.strip().isascii() and value.strip().isdigit()
    if digits and int(value) > 0:
        return int(value)
    shown = repr(value) if isinstance(value, str | int) else f"a {type(value).__name__}"
    raise UsageError(f"a {kind} id is a whole number from 1, not {shown}")
