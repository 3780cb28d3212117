"""Dependencies between jobs (SPEC "Composing jobs"): a child enqueued with `depends_on`
waits (status `waiting`, never claimed) until every parent is done; a parent that ends
dead or cancelled cancels it, transitively, unless the child said
`on_parent_failure="continue"` (then that parent counts as done).

The store: forkq_dependencies holds one row per (parent, child) until the child ends,
and forkq_jobs.deps flags the rows involved (bit 1: children wait on this job; bit 2: it
has parents). A parent's end settles its children in the transaction that ends it,
wherever it ends: success (complete_in_transaction, so also the hand-back), dead (fail),
cancelled (finish_cancel, cancel_jobs). The end of a job with neither bit stays the one
statement it was (its WHERE says `(deps & 3) = 0`); only when that statement changed
fewer rows than asked does a second pass look for flagged jobs (or find a lost lease).

Why a release is exact (never twice, never zero) with two parents of one child ending
at once on two hosts (MySQL/MariaDB, READ COMMITTED sessions):
- A child's enqueue locks its parents' rows (FOR UPDATE, id order) and flags the
  unfinished ones. A parent's end writes its own row, so the two are serialised on it:
  either the end commits first and the enqueue reads the parent ended, or the enqueue
  commits first and the ending statement, which waits for the row lock and then
  re-reads the row's latest version, sees bit 1 and leaves it to the second pass.
- The second pass locks the waiting children (FOR UPDATE, id order) before counting
  their unfinished parents. Two ends that share a child both lock it; the second waits
  until the first commits. Its count is a new statement, and READ COMMITTED gives each
  statement a fresh view: it sees the first end committed, so the last of the two to
  get the lock counts zero unfinished parents and releases the child. The first to get
  it counted the other (still uncommitted) as unfinished and left the child waiting.
  Never zero: the counts are serialised by the child's lock, so the later one sees the
  earlier. Never twice: the release needs `status = 'waiting'` on the locked row.
  (Under REPEATABLE READ the later count could read a view from before the wait:
  the sessions' READ COMMITTED is what makes this exact; see mysql_session.py.)
- Locks are taken parent first, then children in id order, and a child's id is always
  above its parents' (they existed when it was enqueued), so ends never wait in a cycle.
  Deadlocks and lock waits past the timeout are retried whole (_retrying).
SQLite takes the write lock for every write transaction (BEGIN IMMEDIATE): one at a time.

What escapes this (Galera: two writer nodes for a moment, whose row locks are not
certified across nodes; a daemon from before schema 14 in a rolling upgrade, whose end
settles no child) the cluster chores catch: sweep_waiting looks at a bounded window of
forkq_dependencies each tick and settles its stuck children with the same rule (_settle).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from supervisor.errors import SchemaError, UsageError
from supervisor.kinds import OnSuccess
from supervisor.models import JobState, NewJob
from supervisor.store.core import AHEAD_US, DEPS_SCHEMA_VERSION, StoreCore

UNFINISHED = frozenset(
    {JobState.WAITING, JobState.READY, JobState.SCHEDULED, JobState.RUNNING, JobState.CANCELLING}
)
FAILED = frozenset({JobState.DEAD, JobState.CANCELLED})
CANCEL = "cancel"
CONTINUE = "continue"
ON_PARENT_FAILURE = (CANCEL, CONTINUE)
MOST_PARENTS = 1000
# forkq_jobs.deps bits: children wait on it (its end settles them); it has parents (its end
# forgets its rows of forkq_dependencies). A first pass leaves out rows with either.
HAS_CHILDREN = 1
HAS_PARENTS = 2
EITHER = HAS_CHILDREN | HAS_PARENTS


SWEEP_LIMIT = 500  # rows of forkq_dependencies the chores look at per tick
LAST_ID = 2**63 - 1


class Edge(NamedTuple):
    """One row of forkq_dependencies, and how its parent ended (or DONE: gone)."""

    parent: int
    child: int
    on_failure: str
    ended: str


def _stuck(rows: Sequence[Mapping[str, Any]]) -> list[Edge]:
    """Of the sweep's rows (parents of waiting children), the ended parents of children
    that should not be waiting: none of their parents unfinished, or a failed one that
    cancels them. Read without locks: _settle_stuck reads them again, locked."""
    by_child: dict[int, list[Edge]] = {}
    for r in rows:
        status = JobState.DONE if r["parent_status"] is None else str(r["parent_status"])
        edge = Edge(int(r["parent_id"]), int(r["child_id"]), str(r["on_parent_failure"]), status)
        by_child.setdefault(edge.child, []).append(edge)
    stuck: list[Edge] = []
    for edges in by_child.values():
        unfinished = any(e.ended in UNFINISHED for e in edges)
        cancels = any(e.ended in FAILED and e.on_failure != CONTINUE for e in edges)
        if cancels or not unfinished:
            stuck += [e for e in edges if e.ended not in UNFINISHED]
    return stuck


def ending_statement(mode: str) -> str:
    """The statement of complete_pass that ends the jobs (archive's copy goes before it)."""
    return "deps_complete_keep" if mode == OnSuccess.KEEP else "deps_complete_delete"


class DependencyOps(StoreCore):
    """Enqueue with parents, and settle a parent's children when it ends."""

    def has_deps_schema(self) -> bool:
        return self.schema_at_least(DEPS_SCHEMA_VERSION)

    # --- producers -----------------------------------------------------------------------

    def enqueue_dependent(self, job: NewJob, parents: Sequence[int], on_failure: str) -> int:
        """One job waiting on `parents`, in its own transaction: its id."""
        return self.enqueue_dependents([(job, parents, on_failure)])[0]

    def enqueue_dependents(
        self, jobs: Sequence[tuple[NewJob, Sequence[int], str]], chained: bool = False
    ) -> list[int]:
        """Jobs with their parents, in one transaction, in order; with `chained` each also
        waits on the one before it (q.chain)."""
        if not self.has_deps_schema():
            raise SchemaError(
                f"depends_on needs schema version {DEPS_SCHEMA_VERSION}: run `forkq schema apply`"
            )

        def attempt() -> list[int]:
            ids: list[int] = []
            with self._tx():
                for job, parents, on_failure in jobs:
                    wanted = [*parents, *ids[-1:]] if chained else list(parents)
                    if wanted:
                        ids.append(self.add_dependent(job, wanted, on_failure))
                    else:
                        ids.append(self._insert_job(self._params(**self.job_params(job))))
            return ids

        return self._retrying(attempt)

    def add_dependent(self, job: NewJob, parents: Sequence[int], on_failure: str) -> int:
        """Inside an open transaction: insert `job` waiting on `parents`; its id.

        A parent already done (or gone: deleted on success, or purged) counts as done; one
        already dead or cancelled applies `on_failure` now (the job is created cancelled,
        or it counts as done). An id no job ever had is a UsageError (the transaction is
        rolled back): ids only grow, so a parent id above the new job's was never issued.
        """
        wanted = sorted({int(p) for p in parents})
        found = {
            int(r["id"]): str(r["status"])
            for r in self._fetchall("deps_lock_parents", self._params(ids=self._ids(wanted)))
        }
        child = self._insert_job(self._params(**self.job_params(job)))
        unknown = [p for p in wanted if p not in found and (p >= child or p < 1)]
        if unknown:
            raise UsageError(f"depends_on: there is no job {unknown[0]}")
        pending = [p for p in wanted if found.get(p) in UNFINISHED]
        failed = [p for p in wanted if found.get(p) in FAILED]
        status: str | None = None
        error: str | None = None
        if failed and on_failure == CANCEL:
            status = JobState.CANCELLED
            error = f"cancelled: parent job {failed[0]} had ended {found[failed[0]]}"
        elif pending:
            status = JobState.WAITING
        self._execute("deps_mark_child", self._params(id=child, status=status, error=error))
        if status == JobState.CANCELLED:
            return child  # ended already: no rows (they live until their child ends)
        edges = json.dumps([[p, child, on_failure] for p in wanted])
        self._execute("deps_add_edges", self._params(edges=edges))
        if pending:
            self._execute("deps_flag_parents", self._params(ids=self._ids(pending)))
        return child

    # --- a parent's end --------------------------------------------------------------------

    def complete_pass(self, owner: str, ids: Sequence[int], mode: str, skip: int) -> int:
        """Record success of held jobs: skip = EITHER leaves out the flagged rows (the first
        pass, the only one for jobs without dependencies); skip = 0 takes them too."""
        params = self._params(owner=owner, ids=self._ids(ids), skip=skip)
        if mode == OnSuccess.ARCHIVE:
            self._execute("deps_complete_archive_copy", params)
        return self._execute(ending_statement(mode), params)

    def complete_parents(self, owner: str, ids: Sequence[int], mode: str) -> tuple[int, int]:
        """The second pass, in the first one's transaction: of `ids`, those this owner still
        holds are flagged (parents, children); record their success, release their
        children and forget their own parents. (successes recorded, children released)"""
        held = [
            int(r["id"])
            for r in self._fetchall("deps_held", self._params(owner=owner, ids=self._ids(ids)))
        ]
        if not held:
            return 0, 0
        done = self.complete_pass(owner, held, mode, skip=0)
        released = self.settle_children(held, ended=JobState.DONE)
        self.forget_parents(held)
        return done, released

    def forget_parents(self, children: Sequence[int]) -> None:
        """Rows of forkq_dependencies live until their child ends: then they go (in the
        transaction that ends it), so the table holds only what waits or runs."""
        self._execute("deps_forget", self._params(ids=self._ids(children)))

    def fail_dead(
        self, owner: str, job_id: int, error: str, max_attempts: int | None, only_expired: bool
    ) -> bool:
        """The job ends dead; a flagged parent's children are settled in the same transaction."""
        params = self._params(
            owner=owner,
            id=job_id,
            error=error,
            max_attempts=max_attempts,
            only_expired=1 if only_expired else 0,
            skip=EITHER,
        )
        if self._retrying(lambda: self._execute("deps_fail_dead", params)) == 1:
            return True

        def attempt() -> bool:
            with self._tx():
                if self._execute("deps_fail_dead", {**params, "skip": 0}) != 1:
                    return False  # no longer held
                self.settle_children([job_id], ended=JobState.DEAD)
                self.forget_parents([job_id])
                return True

        return self._retrying(attempt)

    def settle_children(self, parents: Sequence[int], ended: str) -> int:
        """Inside the transaction that ended `parents` (done, dead or cancelled): release
        each waiting child with no unfinished parent left; when they failed, first cancel
        the children that said `cancel`, and theirs in turn. How many it settled."""
        level, settled = sorted(set(parents)), 0
        while level:
            edges = [
                Edge(int(e["parent_id"]), int(e["child_id"]), str(e["on_parent_failure"]), ended)
                for e in self._fetchall("deps_children", self._params(ids=self._ids(level)))
            ]
            level, released = self._settle(edges)
            settled += len(level) + released
            ended = JobState.CANCELLED
        return settled

    def _settle(self, edges: Sequence[Edge]) -> tuple[list[int], int]:
        """The rule, in one place: lock the edges' children still waiting (id order), cancel
        those a failed parent cancels, release those with no unfinished parent left. The
        ids cancelled (their own children come next) and how many were released."""
        if not edges:
            return [], 0
        children = sorted({e.child for e in edges})
        waiting = {
            int(r["id"])
            for r in self._fetchall("deps_lock_waiting", self._params(ids=self._ids(children)))
        }
        doomed: set[int] = set()
        for edge in edges:
            if (
                edge.ended in FAILED
                and edge.on_failure != CONTINUE
                and edge.child in waiting - doomed
            ):
                doomed.add(edge.child)
                error = f"cancelled: parent job {edge.parent} ended {edge.ended}"
                self._execute("deps_cancel", self._params(ids=self._ids([edge.child]), error=error))
        if doomed:
            self.forget_parents(sorted(doomed))
        return sorted(doomed), self._release(sorted(waiting - doomed))

    def _release(self, children: Sequence[int]) -> int:
        if not children:
            return 0
        rows = self._fetchall("deps_unfinished", self._params(ids=self._ids(children)))
        pending = {int(r["child_id"]) for r in rows}
        free = [c for c in children if c not in pending]
        if not free:
            return 0
        return self._execute("deps_release", self._params(ids=self._ids(free), ahead_us=AHEAD_US))

    # --- the chores' safety net -----------------------------------------------------------

    def sweep_waiting(self, start: int | None = None, limit: int = SWEEP_LIMIT) -> tuple[int, int]:
        """Settle waiting children whose release was missed: every parent ended, or one that
        failed cancels them. Exact as long as each end settles its children; this catches
        what escaped that (two Galera writers, whose row locks are not certified across
        nodes; a parent ended by a daemon from before schema 14 in a rolling upgrade).

        Looks at `limit` rows of forkq_dependencies from child id `start` (None: from a
        random point), wrapping to the start. (children settled, where to start next)."""
        if not self.has_deps_schema():
            return 0, 0
        if start is None:
            start = random.randint(0, int(self._rows("deps_sweep_top")[0]["top"]))
        window = self._window(start, LAST_ID, limit)
        if len(window) < limit and start > 0:
            window += self._window(0, start, limit - len(window))
        after = window[-1] + 1 if len(window) == limit else 0
        if not window:
            return 0, after
        rows = self._rows("deps_sweep_edges", ids=self._ids(sorted(set(window))))
        stuck = _stuck(rows)
        if not stuck:
            return 0, after
        return self._retrying(lambda: self._settle_stuck(stuck)), after

    def _window(self, start: int, stop: int, limit: int) -> list[int]:
        rows = self._rows("deps_sweep_window", start=start, stop=stop, limit=limit)
        return [int(r["child_id"]) for r in rows]

    def _settle_stuck(self, edges: Sequence[Edge]) -> int:
        """In one transaction: the ended parents locked (id order) and read again, then the
        rule applied as their end would have applied it."""
        with self._tx():
            parents = sorted({e.parent for e in edges})
            now = {
                int(r["id"]): str(r["status"])
                for r in self._fetchall("deps_lock_parents", self._params(ids=self._ids(parents)))
            }
            ended = [
                e._replace(ended=now.get(e.parent, JobState.DONE))
                for e in edges
                if now.get(e.parent) not in UNFINISHED
            ]
            doomed, released = self._settle(ended)
            return len(doomed) + released + self.settle_children(doomed, JobState.CANCELLED)

    # --- reads -----------------------------------------------------------------------------

    def parents_of(self, job_id: int) -> list[int]:
        """The ids the job was enqueued to wait on ([] before schema 14)."""
        if not self.has_deps_schema():
            return []
        return [int(r["id"]) for r in self._rows("deps_parents", id=job_id)]

    def dependents_of(self, job_id: int) -> list[int]:
        """The ids of the jobs enqueued to wait on this one ([] before schema 14)."""
        if not self.has_deps_schema():
            return []
        return [int(r["id"]) for r in self._rows("deps_dependents", id=job_id)]
