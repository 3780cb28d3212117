"""Batches (`q.batch()`): callbacks enqueued exactly once when every job of a batch has ended.

There is no counter row that every finishing job locks. A job of a batch carries its
batch_id (forkq_jobs.batch_id, indexed with its status: batch_status on MariaDB, schema
18); the transaction that ends it counts the batch's ready jobs on that index, capped at
FEW_LEFT + 1 entries (so the count costs the same early in a batch of 100,000). Only in
the batch's tail, at most FEW_LEFT ready, does it count the unfinished ones (capped at
TAIL_OPEN + 1), and while at most TAIL_OPEN are unfinished it locks the batch row (FOR
UPDATE) and counts again, exactly; at zero it enqueues the callbacks under
`forkq-batch:<id>:<event>` and marks the row settled, both in that transaction. So the
finishing transactions of a batch's tail take that lock one after the other (a few claims
of each worker, once per batch).

Why that is exact. Safety (never twice): a settle happens only under the batch row's lock
and only while `settled_at IS NULL`, and writes settled_at in the same transaction.
Liveness (at least once): forkq's sessions run READ COMMITTED, so each statement reads
what has committed when it starts. Take the finisher L whose transaction commits last
and suppose it locks. Any other finisher X that locked too either took the lock before L
(and committed before L got it, so L's recount sees X's end) or would have to wait for L's
commit (impossible: L commits last). The two last jobs ending at once on two hosts are
this case: the second to take the lock sees the first's end and settles. L locks unless
its counts, read before it commits, saw more left than the thresholds: more than
TAIL_OPEN unfinished (its batch's last jobs ended in concurrent transactions holding more
than that: every worker's claim of up to claim_batch jobs ends in one; with FEW_LEFT
alone, two workers ending 17 of its last jobs each at once left it to the chore), or more
than FEW_LEFT ready that other workers then claimed, ran and ended before L committed (L
descheduled between its count and its commit, on a loaded host). Then, or when its last
job ends through a path without this hook (a cancel, a daemon killed mid-commit whose job
the reaper ends), the cluster chore (settle_open_batches, each check tick) settles it:
later, still exactly once. (Closing that window for good takes a lock every finisher
waits on: the counter row this design avoids.) A master writing a busy child's successes
looks up their batches first (note_batch_members), so its transaction runs the hook too.
SQLite has one writer at a time, so the finisher that commits last sees every other end:
there the count only asks whether any job is left (few_left and tail_open 0).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from supervisor.errors import SchemaError
from supervisor.models import BatchStatus, JobState, NewJob
from supervisor.store.core import StoreCore

# forkq_batches and forkq_jobs.batch_id (and on MariaDB indexed_columns_version's columns).
BATCHES_SCHEMA_VERSION = 13
FEW_LEFT = 16  # at most this many ready jobs left: the batch's tail, count its unfinished ones
TAIL_OPEN = 1024  # at most this many unfinished in the tail: lock the batch row and recount
MEMBERS_KEPT = 20_000  # a worker's memory of claimed batch jobs (job id -> batch id)
ENDED = frozenset({JobState.DONE, JobState.DEAD, JobState.CANCELLED})
EVENTS = ("success", "complete", "dead")


class BatchOps(StoreCore):
    """Opening, sealing and settling batches; the finishing transaction's hook."""

    # SQLite runs one writer at a time: the last finisher's count sees every other end, so
    # it only asks whether any job is left (one index entry read, inside the write lock).
    few_left: int = FEW_LEFT
    tail_open: int = TAIL_OPEN

    # Job id -> batch id of the batch jobs this store's worker claimed: the completion path
    # asks it (one dict look-up) instead of the database. None until the first batch job.
    batch_members: dict[int, int] | None = None

    # --- producers -----------------------------------------------------------------------

    def require_batches_schema(self) -> None:
        """Batches need forkq_batches, and their counts forkq_jobs_batch as this backend's
        statements read it (indexed_columns_version): refuse a batch before any of its rows
        is written, never at its seal (a batch never sealed never settles)."""
        if not self.has_batches_schema():
            needed = max(BATCHES_SCHEMA_VERSION, self.indexed_columns_version)
            raise SchemaError(f"batches need schema version {needed}: run `forkq schema apply`")

    def has_batches_schema(self) -> bool:
        return self.schema_at_least(max(BATCHES_SCHEMA_VERSION, self.indexed_columns_version))

    def open_batch(self, callbacks: dict[str, tuple[str, str]], payload: str, conn: Any) -> int:
        """A new open batch (no callback before it is sealed); its id. On `conn` (the
        caller's transaction) when given, else in a transaction of its own."""
        self.require_batches_schema()
        params = self._params(callbacks=json.dumps(callbacks), payload=payload)
        if conn is not None:
            self._execute_on(conn, "batch_create", params)
            return int(self._fetchall_on(conn, "batch_last_id", params)[0]["id"])

        def attempt() -> int:
            with self._tx():
                self._execute("batch_create", params)
                return int(self._fetchall("batch_last_id", params)[0]["id"])

        return self._retrying(attempt)

    def seal_batch(self, batch_id: int, total: int, conn: Any) -> bool:
        """Close the batch with `total` jobs; settle it now if they have all ended already
        (or there are none). True if it settled."""
        params = self._params(id=batch_id, total=total)
        if conn is not None:
            self._execute_on(conn, "batch_seal", params)
            return self._settle_locked(batch_id, conn)

        def attempt() -> bool:
            with self._tx():
                self._execute("batch_seal", params)
                return self._settle_locked(batch_id, None)

        return self._retrying(attempt)

    # --- the finishing transaction's hook -------------------------------------------------

    def note_batch_job(self, job_id: int, batch_id: int) -> None:
        """Remember that a job this worker holds is in a batch (before its end is written)."""
        if self.batch_members is None:
            self.batch_members = {}
        elif len(self.batch_members) >= MEMBERS_KEPT:  # ended long ago: forget the oldest half
            for old in list(self.batch_members)[: MEMBERS_KEPT // 2]:
                del self.batch_members[old]
        self.batch_members[job_id] = batch_id

    def note_batch_members(self, ids: Sequence[int]) -> None:
        """Before ending jobs another process claimed (the master writing a busy child's
        successes): note those in a batch, so the ending transaction's hook settles it then,
        not the chore a check tick later."""
        if self.has_batches_schema():
            for row in self._fetchall("batch_members_of", self._params(ids=self._ids(ids))):
                self.note_batch_job(int(row["id"]), int(row["batch_id"]))

    def settle_batches_of(self, ids: Sequence[int]) -> None:
        """Inside the transaction that just ended `ids`: settle their batches if nothing
        else of them is left. Batch rows are locked in id order (no deadlock between two
        finishers of the same batches). A no-op for jobs in no batch."""
        members = self.batch_members or {}
        batches = sorted({members[i] for i in ids if i in members})
        for batch_id in batches:
            params = self._params(id=batch_id, limit=self.few_left + 1)
            if int(self._fetchall("batch_ready_count", params)[0]["n"]) > self.few_left:
                continue  # many jobs still wait: not near the end (live entries, read at once)
            params = self._params(id=batch_id, limit=self.tail_open + 1)
            if int(self._fetchall("batch_open_count", params)[0]["n"]) <= self.tail_open:
                self._settle_locked(batch_id, None)

    def settle_open_batches(self, limit: int = 100) -> int:
        """The chore: settle sealed batches whose jobs have all ended but that no finishing
        transaction settled (see the module's docstring); oldest first. How many settled."""
        settled = 0
        for row in self._rows("batch_open_list", limit=limit):
            batch_id = int(row["id"])
            if int(self._rows("batch_open_count", id=batch_id, limit=1)[0]["n"]):
                continue  # still running: no lock taken

            def attempt(batch_id: int = batch_id) -> bool:
                with self._tx():
                    return self._settle_locked(batch_id, None)

            settled += int(self._retrying(attempt))
        return settled

    def _settle_locked(self, batch_id: int, conn: Any) -> bool:
        """Lock the batch row, and if it is sealed, open and has no unfinished job left,
        enqueue its callbacks and mark it settled. In an open transaction (ours or `conn`)."""
        rows = self._batch_rows(conn, "batch_lock", id=batch_id)
        if not rows or not rows[0]["sealed"] or rows[0]["settled"]:
            return False
        if int(self._batch_rows(conn, "batch_open_count", id=batch_id, limit=1)[0]["n"]):
            return False
        ended = {
            r["status"]: int(r["n"]) for r in self._batch_rows(conn, "batch_ended", id=batch_id)
        }
        counts = _counts(int(rows[0]["total"]), ended, pending=0)
        fired: dict[str, int] = {}
        callbacks = json.loads(rows[0]["callbacks"])
        for event in fired_events(counts):
            if event in callbacks:
                handler, queue = callbacks[event]
                body = {"batch_id": batch_id, "event": event, **counts}
                body["payload"] = json.loads(rows[0]["payload"])
                job = NewJob(
                    handler, json.dumps(body), queue, unique_key=f"forkq-batch:{batch_id}:{event}"
                )
                fired[event] = self._batch_insert(conn, job)
        params = self._params(id=batch_id, fired=json.dumps(fired), **_stored(counts))
        changed = (
            self._execute_on(conn, "batch_settle", params)
            if conn is not None
            else self._execute("batch_settle", params)
        )
        return changed == 1

    def _batch_rows(self, conn: Any, name: str, **values: Any) -> list[dict[str, Any]]:
        if conn is not None:
            return self._fetchall_on(conn, name, self._params(**values))
        return self._fetchall(name, self._params(**values))

    def _batch_insert(self, conn: Any, job: NewJob) -> int:
        if conn is not None:
            return self.insert_on(conn, job)
        return self._insert_job(self._params(**self.job_params(job)))

    # --- progress ------------------------------------------------------------------------

    def batch_status(self, batch_id: int) -> BatchStatus | None:
        """Where the batch stands: counted live while open, as counted at its settle after."""
        self.require_batches_schema()
        rows = self._rows("batch_get", id=batch_id)
        if not rows:
            return None
        row = rows[0]
        ended = {r["status"]: int(r["n"]) for r in self._rows("batch_ended", id=batch_id)}
        pending = sum(n for status, n in ended.items() if status not in ENDED)
        if row["settled_at_s"] is not None:
            counts = {k: int(row[k] or 0) for k in ("done", "dead", "cancelled")}
            counts = {"total": int(row["total"]), **counts}
        else:
            counts = _counts(int(row["total"]), ended, pending)
        return BatchStatus(
            id=int(row["id"]),
            pending=pending,
            sealed=bool(row["sealed"]),
            created_at=float(row["created_at_s"]),
            settled_at=None if row["settled_at_s"] is None else float(row["settled_at_s"]),
            callbacks={e: str(h) for e, (h, _q) in json.loads(row["callbacks"]).items()},
            fired={e: int(i) for e, i in json.loads(row["fired"] or "{}").items()},
            payload=str(row["payload"]),
            **counts,
        )

    def batch_jobs(self, batch_id: int, limit: int = 100) -> list[dict[str, Any]]:
        """The batch's jobs still in the jobs table (done jobs deleted or archived are not)."""
        return self._rows("batch_jobs", id=batch_id, limit=limit)


def _counts(total: int, ended: dict[str, int], pending: int) -> dict[str, int]:
    """total/done/dead/cancelled: a done job may be deleted or archived, so done is what the
    total leaves once the unfinished, dead and cancelled are counted."""
    dead, cancelled = ended.get(JobState.DEAD, 0), ended.get(JobState.CANCELLED, 0)
    seen = sum(ended.values())
    total = max(total, seen)
    return {
        "total": total,
        "done": max(0, total - pending - dead - cancelled),
        "dead": dead,
        "cancelled": cancelled,
    }


def _stored(counts: dict[str, int]) -> dict[str, int]:
    return {k: counts[k] for k in ("done", "dead", "cancelled")}


def fired_events(counts: dict[str, int]) -> list[str]:
    """Sidekiq Pro's meaning: complete when every job ended whatever its end; success when
    every job ended done; dead when at least one ended dead."""
    events = ["complete"]
    if counts["dead"] == 0 and counts["cancelled"] == 0:
        events.append("success")
    if counts["dead"]:
        events.append("dead")
    return events
