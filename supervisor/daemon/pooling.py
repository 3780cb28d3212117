"""Keeping the pools: their sizes, spawning and retiring children, the poll that wakes
idle ones and promotes scheduled jobs, heartbeats, and what a gone child means for its
pool (slots, crash-loop back-off).

It works on the master's shared state (shared.py: pools, store, paused queues), which
reload() updates in place, on the children, and on the master's descriptors a new child
closes (`fds`); every decision is a pure function of decisions.py.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial

from supervisor import events
from supervisor.cluster.promote import keep_schedule, needs_demotion, needs_promotion
from supervisor.daemon import systemd
from supervisor.daemon.children import Children
from supervisor.daemon.decisions import (
    PoolView,
    came_up,
    failed_at_startup,
    plan_size,
    resized,
    respawn_delay,
    to_retire,
)
from supervisor.daemon.ledger import Holding
from supervisor.daemon.shared import Shared
from supervisor.daemon.state import Child, Phase, PoolState
from supervisor.kinds import RetireReason, Role


class Pooling:
    def __init__(self, state: Shared, children: Children, fds: Callable[[], list[int]]) -> None:
        self.state = state
        self.children = children
        self.fds = fds  # what a new child closes first: the master's own descriptors
        self.counted: dict[int, tuple[int, int]] = {}  # pid -> (jobs, failed) already counted
        self.finished: dict[str, tuple[int, int]] = {}  # queue -> (done, failed) not yet written

    # --- sizes ---------------------------------------------------------------------------

    def maintain(self, now: float) -> None:
        """Spawn up to each pool's target (respecting crash back-off), retire the excess."""
        s = self.state
        grace = s.config.supervisor.shutdown_timeout
        for pool in s.pools.values():
            live = self.children.of(pool.config.name)
            if pool.failures and any(came_up(now - c.started, c.reported, c.jobs) for c in live):
                pool.failures = 0  # one came up and stays up: the loop (and its alert) is over
            facts = [(c.pid, c.phase is Phase.IDLE, c.started) for c in live]
            shed = set(to_retire(facts, pool.target))
            for child in live:
                if child.pid in shed:
                    self.children.retire(child, now, RetireReason.POOL_SHRINKS, grace)
            while len(self.children.of(pool.config.name)) < pool.target and now >= pool.next_spawn:
                self.spawn(pool, now)
                if pool.failures:
                    pool.next_spawn = now + respawn_delay(pool.failures)
                    break
        for child in self.children:
            if child.pool not in s.pools:
                self.children.retire(child, now, RetireReason.POOL_REMOVED, grace)

    def spawn(self, pool: PoolState, now: float) -> None:
        s = self.state
        child = self.children.spawn(s.config, pool, now, self.fds(), s.store.schema_checked)
        s.db(
            lambda: s.store.register_process(
                child.name, s.host, child.pid, Role.WORKER, child.pool, s.name, s.node
            )
        )

    def scale(self, now: float) -> None:
        """Dynamic pools: count due jobs only where every child is busy (bounded, rare)."""
        s = self.state
        for pool in s.pools.values():
            cfg = pool.config
            kids = self.children.of(cfg.name)
            idle = [c for c in kids if c.is_idle()]
            ready = None
            # All busy, or none (workers = 0, or TTOU'd): is there a backlog?
            if not idle and pool.maximum > 0 and cfg.name not in s.paused:
                ready = s.db(partial(s.store.count_ready, cfg.name, 1000))
            view = PoolView(
                minimum=pool.minimum,
                maximum=pool.maximum,
                target=pool.target,
                live=len(kids),
                idle=len(idle),
                ready=ready,
                longest_idle=max((now - c.idle_since for c in idle), default=0.0),
                answered=s.guard.error is None,
            )
            new_target = plan_size(view)
            pool.saturated = bool(ready) and pool.target >= pool.maximum
            if new_target != pool.target:
                s.log.info(
                    events.POOL_RESIZED,
                    pool=cfg.name,
                    size=new_target,
                    was=pool.target,
                    ready=ready,
                )
                pool.target = new_target

    def resize_all(self, delta: int) -> None:
        """TTIN / TTOU: one more / one fewer child in every pool."""
        for pool in self.state.pools.values():
            pool.minimum, pool.maximum, pool.target = resized(
                pool.minimum, pool.maximum, pool.target, delta
            )
            self.state.log.info(
                events.POOL_RESIZED,
                pool=pool.config.name,
                size=pool.target,
                by="SIGTTIN" if delta > 0 else "SIGTTOU",
            )

    def child_gone(self, child: Child, status: int, now: float) -> None:
        """Free its slot, count its jobs, and back off a pool whose children die at start."""
        self.count_finished(child)
        self.counted.pop(child.pid, None)
        pool = self.state.pools.get(child.pool)
        if pool is None:
            return
        pool.slots.discard(child.slot)
        pool.jobs_done += child.jobs
        pool.sizing = child.sizing or pool.sizing
        exit_ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        # A child the master killed on purpose (a quit, a retirement it did not obey) says
        # nothing about whether its pool's children can start.
        lived = now - child.started
        if child.retiring and not exit_ok and not came_up(lived, child.reported, child.jobs):
            return  # SIGTERMed while it started (a stop or reload): neither a failure nor a start
        if child.sigkilled or not failed_at_startup(lived, exit_ok, child.reported, child.jobs):
            pool.failures = 0
            return
        pool.failures += 1
        pool.next_spawn = now + respawn_delay(pool.failures)
        event = events.POOL_CRASH_LOOP if pool.crash_looping else events.CHILD_FAILED_AT_START
        self.state.log.error(
            event,
            pool=child.pool,
            failures=pool.failures,
            retry_in=round(respawn_delay(pool.failures), 2),
        )

    def report_status(self) -> None:
        """The one-line status systemd shows (`systemctl status`)."""
        s = self.state
        busy = sum(1 for c in self.children if c.now_running is not None)
        # Finished by live children (c.jobs also counts the one each runs now)
        finished = sum(c.board.read().jobs for c in self.children)
        jobs = sum(p.jobs_done for p in s.pools.values()) + finished
        pools = ", ".join(
            f"{name} {len(self.children.of(name, retiring=True))}/{p.target}"
            for name, p in s.pools.items()
        )
        alive = len(self.children)
        text = f"{alive} {'child' if alive == 1 else 'children'} ({busy} busy),"
        text += f" {jobs} {'job' if jobs == 1 else 'jobs'} done; pools: {pools}"
        if s.guard.error:
            text += "; database unreachable"
        systemd.status(text)

    # --- the poll and heartbeats ---------------------------------------------------------

    def poll(self) -> None:
        """One query for every pool: promote scheduled jobs about to fall due, and wake
        idle children whose queue has a due job."""
        s = self.state
        pools = sorted(set(s.pools) - s.paused)
        if not pools:
            return
        times = s.db(lambda: s.store.poll(pools))
        if not times:
            return
        if any(needs_promotion(t) or needs_demotion(t) for t in times.values()):
            s.db(lambda: keep_schedule(s.store, times))
        for child in self.children:
            due = times.get(child.pool)
            if child.is_idle() and due and due.ready_in is not None and due.ready_in <= 0:
                self.children.wake(child)

    def cancels(self, now: float) -> None:
        """Cancel requests for jobs our children hold. Only a child whose handler runs the
        job is killed (the job ends cancelled once it is reaped, Settling.settle_child); a
        job it holds unstarted never starts and ends cancelled now; one whose handler
        already succeeded is acknowledged (done); one whose outcome was written is ended
        cancelled (a failure's write does not take a cancelling row)."""
        s = self.state
        if not len(self.children):
            return
        asked = s.db(s.store.cancelling_jobs)
        if not asked:
            return
        holders = {c.name: c for c in self.children}
        for job_id, holder in asked:
            child = holders.get(holder)
            if child is None:
                continue
            found = child.ledger.find(job_id, child.board)
            if found is Holding.RUNNING:
                self.children.cancel(child, job_id, now)
            elif found is Holding.SUCCEEDED:
                s.db(partial(s.store.complete, holder, [job_id], child.on_success))
            elif found is Holding.UNKNOWN:
                continue  # a claim under way, or its lock held: the next look decides
            elif s.db(partial(s.store.finish_cancel, job_id)):
                s.log.warning(events.JOB_CANCELLED, job_id=job_id, child_pid=child.pid, held=found)

    def wake_named(self, queues: set[str]) -> None:
        """A local producer named these queues: wake one idle child of each, no query."""
        s = self.state
        for name in (queues & s.pools.keys()) - s.paused:
            idle = [c for c in self.children.of(name) if c.is_idle()]
            if idle:
                self.children.wake(idle[0])

    def count_finished(self, child: Child) -> None:
        """Add what a child finished since we last looked (its scoreboard) to its queue."""
        entry = child.board.read()
        jobs, failed = self.counted.get(child.pid, (0, 0))
        new_jobs, new_failed = entry.jobs - jobs, entry.failed - failed
        if new_jobs > 0:
            done, fails = self.finished.get(child.pool, (0, 0))
            self.finished[child.pool] = (done + new_jobs - new_failed, fails + new_failed)
            self.counted[child.pid] = (entry.jobs, entry.failed)

    def write_throughput(self) -> None:
        """One upsert per queue, and one per handler timed, per heartbeat into this
        minute's rows of this host."""
        s = self.state
        for child in self.children:
            self.count_finished(child)
        minute = (time.time() + s.clock_offset) // 60 * 60  # the database clock's minute
        timing = self.children.timing
        if timing:
            written = s.db(lambda: s.store.record_handler_stats(minute, s.host, timing))
            if written is not None:
                timing.clear()
        if not self.finished:
            return
        counts = dict(self.finished)
        if s.db(lambda: s.store.record_throughput(minute, s.host, counts)) is not None:
            self.finished.clear()

    def heartbeat(self) -> None:
        s = self.state
        self.write_throughput()
        for old in {id(c.store): c.store for c in self.children if c.store}.values():
            moved = [s.name] + [c.name for c in self.children if c.store is old]
            s.db(lambda: old.beat(moved))  # noqa: B023 (called at once): a reload moved us off
        names = [s.name] + [c.name for c in self.children if c.store is None]
        beaten = s.db(lambda: s.store.beat(names))
        if beaten is None or beaten >= len(names):
            return
        # Rows lost (the database restored, or pruned while we were cut off): re-register.
        s.db(
            lambda: s.store.register_process(s.name, s.host, os.getpid(), Role.MASTER, node=s.node)
        )
        for c in (c for c in self.children if c.store is None):
            register = s.store.register_process
            s.db(partial(register, c.name, s.host, c.pid, Role.WORKER, c.pool, s.name, s.node))
