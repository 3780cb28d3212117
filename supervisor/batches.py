"""`q.batch()`: jobs enqueued together, with callbacks enqueued once when all have ended.

The batch row is written when the with-block opens (its jobs carry its id) and sealed
when it ends: no callback fires before, so a job that ends while the block still
enqueues never settles the batch early. With `connection`, every row (batch, jobs, seal)
is written in the caller's transaction and exists iff the caller commits. The settling
itself (exactly once, with no counter row) is store/batches.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol

from supervisor.errors import UsageError
from supervisor.models import NewJob
from supervisor.store import Store


class Producer(Protocol):
    """What a batch needs of its Queue (queue.py), named here so neither imports the other."""

    store: Store

    def build_one(self, handler: str, payload: Any, options: Mapping[str, Any]) -> NewJob: ...

    def build_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[NewJob]: ...

    def insert_built(self, built: Sequence[NewJob], connection: Any = None) -> Sequence[int]: ...


class Batch:
    """A context manager: `with q.batch(on_complete="h") as b: b.enqueue("task", {...})`."""

    def __init__(
        self,
        producer: Producer,
        callbacks: Mapping[str, str | None],
        payload_json: str,
        connection: Any = None,
    ) -> None:
        self.producer = producer
        self.connection = connection
        # Each callback's queue is its handler's registered one, resolved here where the
        # registry is the producer's: [event] = (handler, queue).
        self.callbacks = {
            event: (job.handler, job.queue)
            for event, handler in callbacks.items()
            if handler is not None
            for job in [producer.build_one(handler, None, {})]
        }
        if not self.callbacks:
            raise UsageError("a batch needs a callback: on_success, on_complete or on_dead")
        self.payload_json = payload_json
        self.id: int | None = None
        self.total = 0
        self.sealed = False  # its with-block ended: its total is written, it takes no job

    def __enter__(self) -> Batch:
        if self.id is not None:  # a second batch would be left open: its callbacks lost
            raise UsageError("a batch is entered once: make another with q.batch(...)")
        store = self.producer.store
        self.id = store.open_batch(self.callbacks, self.payload_json, self.connection)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Seal it: its callbacks may fire from now on. In the caller's transaction that is
        being abandoned (an exception), nothing more is written: it rolls back whole."""
        if self.id is None or self.sealed:
            return
        self.sealed = True
        if kind is not None and self.connection is not None:
            return
        self.producer.store.seal_batch(self.id, self.total, self.connection)

    def enqueue(self, handler: str, payload: Any = None, **options: Any) -> int:
        """Queue.enqueue's arguments (but `connection`: the batch's own is used)."""
        _no_parents([options])
        [job_id] = self._insert([self.producer.build_one(handler, payload, options)])
        return job_id

    def enqueue_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[int]:
        """Queue.enqueue_many's: every job in this batch."""
        listed = list(jobs)
        _no_parents(listed)
        return self._insert(self.producer.build_many(listed))

    def _insert(self, built: Sequence[NewJob]) -> list[int]:
        if self.id is None:  # `q.batch()` alone writes nothing: its jobs need its row
            raise UsageError("a batch takes jobs inside `with q.batch(...) as b:` only")
        if self.sealed:  # after the seal its total and callbacks are told
            raise UsageError(
                f"batch {self.id} is sealed: its with-block ended, so it takes no more jobs"
                " (enqueue them inside the block, or in a batch of their own)"
            )
        if any(job.unique_key is not None for job in built):  # a duplicate would be another's
            raise UsageError("a job of a batch cannot have a unique_key")
        jobs = [dataclasses.replace(job, batch_id=self.id) for job in built]
        ids = self.producer.insert_built(jobs, self.connection)
        self.total += len(ids)
        return list(ids)


def _no_parents(jobs: Sequence[Mapping[str, Any]]) -> None:
    """A batch's jobs start as soon as they are enqueued: none waits on a parent (a job
    outside the batch may wait on its jobs, and its callbacks run once all have ended)."""
    if any("depends_on" in job for job in jobs):
        raise UsageError(
            "a job of a batch cannot have depends_on: enqueue the job that waits outside"
            " the batch, or make it the batch's on_success / on_complete callback"
        )
