"""Settling what gone children held: the reaped child's running job and its process row,
and at boot the rows a previous master left on this node.

A settle the database cannot take now waits in `unsettled` and is tried again on the
next loop turn and check tick, in order. Why a job is settled, and whether its attempt
counts, is decided by decisions.settle_reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import partial

from supervisor import events
from supervisor.cluster.chores import CHORES_LOCK, settle_gone_worker, settle_owner
from supervisor.daemon.decisions import counts_held, settle_reason
from supervisor.daemon.shared import Shared
from supervisor.daemon.state import Child
from supervisor.kinds import ChildExit, GoneWorker, Role
from supervisor.observe import metrics
from supervisor.outcomes import Outcome, SettleKind
from supervisor.proc import describe_exit
from supervisor.store import Store

# What a dead child left to settle: (its database, owner name, running job, error, attempt
# counted, held jobs counted, how its attempt ended), settled once that database answers.
Unsettled = tuple[Store, str, int | None, str, bool, bool, str]


class Settling:
    def __init__(self, state: Shared, children: Iterable[Child]) -> None:
        self.state = state  # its store is replaced on reload: read it through the state
        self.children = children
        self.unsettled: list[Unsettled] = []
        # Databases a reload moved the master off, open while a child forked for one
        # works it or something waits to be settled there (moved_off, let_go).
        self.old_stores: list[Store] = []

    def store_of(self, child: Child) -> Store:
        """The database the child works: the master's, or one a reload moved it off."""
        return child.store or self.state.store

    def store_named(self, owner: str) -> Store:
        """The database of the live child named `owner` (a hand-back's), else the master's."""
        return next((c.store for c in self.children if c.name == owner and c.store), None) or (
            self.state.store
        )

    def moved_off(self, old: Store) -> None:
        """A reload moved the master to another database: the children it forked for `old`
        finish their jobs there, and what they leave is settled there (SPEC: HUP replaces
        children gracefully), then the master leaves it (let_go)."""
        for child in self.children:
            child.store = child.store or old
        self.old_stores.append(old)

    def let_go(self, *, stopping: bool = False) -> None:
        """Leave each old database no child works and nothing waits to be settled in: the
        master's row and chores lease there removed (else they would read as a stale
        master for ever), its connection closed. At the stop, every one."""
        s = self.state
        for old in list(self.old_stores):
            if not stopping and (
                any(c.store is old for c in self.children)
                or any(entry[0] is old for entry in self.unsettled)
            ):
                continue
            s.db(lambda: old.remove_processes([s.name]))  # noqa: B023 (called at once)
            s.db(lambda: old.release_lock(CHORES_LOCK, s.name))  # noqa: B023
            old.close()
            self.old_stores.remove(old)

    def finish(self) -> None:
        """At the stop: what waits to be settled, then every old database left."""
        self.settle_pending()
        self.let_go(stopping=True)

    def child_exited(self, child: Child, status: int) -> None:
        """A reaped child: count and log its exit, then settle what it held."""
        label = self.record_exit(child, status)
        self.state.log.info(
            events.CHILD_EXITED,
            pool=child.pool,
            child_pid=child.pid,
            status=describe_exit(status),
            jobs=child.jobs,
            reason=child.exit_reason or str(label),  # why it went, else the metric's label
        )
        if label is ChildExit.MEMORY and child.jobs <= 1:
            self.memory_too_low(child)
        self.settle_child(child, status)

    def memory_too_low(self, child: Child) -> None:
        """A child over memory_limit_mb after at most one job: the limit is below what a
        worker needs to start, and every child would be replaced after each job. Said
        once a pool, as a warning (the child_exited lines alone are info)."""
        pool = self.state.pools.get(child.pool)
        if pool is None or pool.memory_warned:
            return
        pool.memory_warned = True
        self.state.log.warning(
            events.MEMORY_LIMIT_TOO_LOW,
            pool=child.pool,
            memory_limit_mb=pool.config.memory_limit_mb,
            jobs=child.jobs,
            note="a child was over it after its first job: raise it above a worker's size",
        )

    def record_exit(self, child: Child, status: int) -> ChildExit:
        exit_ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        # A child that exited by itself after our SIGTERM finished its job first (it takes
        # SIGTERM as "finish this job, then exit"): our kill did not end it.
        label = metrics.child_exited(
            child.pool,
            exit_ok=exit_ok,
            retire_reason=child.exit_reason,
            timed_out=child.killed_job is not None and not exit_ok,
            killed=child.sigkilled,
            cancelled=child.cancelled_job is not None and not exit_ok,
        )
        if child.killed_job is not None and child.killed_job == child.now_running:
            self.count_killed(child, child.killed_job, Outcome.TIMEOUT)
        return label

    def count_killed(self, child: Child, job_id: int, outcome: Outcome) -> None:
        """Count an attempt the master ended under the job's own queue and handler (SPEC).
        The child is gone with what it knew: one keyed read, on a rare path (a kill)."""
        s, store = self.state, self.store_of(child)
        row = s.db(lambda: store.get_job(job_id))
        if row is None:  # the database does not answer now: the pool is the queue it works
            metrics.job_settled(child.pool, outcome)
        else:
            metrics.job_settled(row.queue, outcome, row.handler)

    def settle_child(self, child: Child, status: int) -> None:
        """Settle what a dead child held, at once: its running job fails (attempt counted)
        unless we killed it for the operator's sake; what it had not started goes back,
        uncounted, unless it died between jobs before its second (decisions.counts_held)."""
        s, store = self.state, self.store_of(child)
        running = child.now_running
        reason = settle_reason(
            running=running,
            killed_job=child.killed_job,
            killed_timeout=child.ending.timeout if child.ending else 0.0,
            killed_by_master=child.sigkilled,
            stopping=s.stopping,
            retire_reason=child.exit_reason,
            exit_description=describe_exit(status),
        )
        cancelled = child.cancelled_job
        # First: settle_owner would end it cancelled unlogged. Not counted when it did not
        # end so (a handler that returned before the kill wrote its own outcome, done); with
        # the database away (None) it will, in settle_owner's pass over cancels.
        over = None if cancelled is None else s.db(lambda: store.finish_cancel(cancelled))
        if cancelled is not None and over is not False:
            self.count_killed(child, cancelled, Outcome.CANCELLED)
        if cancelled is not None and over:
            s.log.warning(events.JOB_CANCELLED, job_id=cancelled, child_pid=child.pid)
        held = counts_held(reason, running, child.jobs)
        ended = "timeout" if reason.kind is SettleKind.TIMED_OUT else "died"  # its history's
        # The cancelled job ended above (or in settle_owner's own pass over cancels): no
        # "worker died" line for the kill we made for it.
        job_id = None if running == cancelled else running
        self.unsettled.append(
            (store, child.name, job_id, reason.message, reason.counts_attempt, held, ended)
        )
        self.settle_pending()
        s.db(lambda: store.remove_processes([child.name]))
        if child.store is not None:
            self.let_go()

    def settle_pending(self) -> None:
        s = self.state
        while self.unsettled:
            store, name, job_id, error, counted, held, ended = self.unsettled[0]
            settle = partial(
                settle_owner, store, name, job_id, error, counted, count_held=held, ended=ended
            )
            done = s.db(settle)
            if done is None:
                return  # database down: try again on the next tick
            self.unsettled.pop(0)
            if job_id is not None and done[1]:  # (not a job the lease reaper gave away)
                s.log.warning(
                    events.JOB_SETTLED, job_id=job_id, error=error, attempt_counted=counted
                )

    def settle_dead_local_processes(self) -> None:
        """Rows of this node whose pid is gone (a previous master killed -9): settle them now.

        Only rows of our node (proc.node_id): a pid says nothing about another machine
        or container, even one with our hostname. Those rows, and rows without a node,
        are left to the stale-heartbeat path.
        """
        s = self.state
        gone = [p for p in s.store.list_processes() if p.node == s.node and not _pid_alive(p.pid)]
        for process in gone:
            if process.role == Role.WORKER:
                settle_gone_worker(s.store, process.name, GoneWorker.FOUND_AT_BOOT)
        s.store.remove_processes([p.name for p in gone])
        if gone:
            s.log.info(events.STALE_PROCESSES_SETTLED, count=len(gone))


def _pid_alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan init has not reaped yet is gone for us)."""
    import psutil  # imported on first use, not at boot (the first fork waits for imports)

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
