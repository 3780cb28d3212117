"""Keeping the pools: their sizes, spawning and retiring children, the poll that wakes
idle ones and promotes scheduled jobs, heartbeats, and what a gone child means for its
pool (slots, crash-loop back-off).

It works on the master's state (pools, children, store, paused queues), which the master
replaces on reload, so it reads them through the master; every decision is a pure
function of decisions.py.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import TYPE_CHECKING

from supervisor import events
from supervisor.cluster.promote import keep_schedule, needs_demotion, needs_promotion
from supervisor.daemon import systemd
from supervisor.daemon.decisions import (
    PoolView,
    failed_at_startup,
    plan_size,
    respawn_delay,
    to_retire,
)
from supervisor.daemon.ledger import Holding
from supervisor.daemon.state import Child, Phase, PoolState

if TYPE_CHECKING:
    from supervisor.daemon.master import Master


class Pooling:
    def __init__(self, master: Master) -> None:
        self.master = master
        self.counted: dict[int, tuple[int, int]] = {}  # pid -> (jobs, failed) already counted
        self.finished: dict[str, tuple[int, int]] = {}  # queue -> (done, failed) not yet written

    # --- sizes ---------------------------------------------------------------------------

    def maintain(self, now: float) -> None:
        """Spawn up to each pool's target (respecting crash back-off), retire the excess."""
        m = self.master
        grace = m.config.supervisor.shutdown_timeout
        for pool in m.pools.values():
            live = m.children.of(pool.config.name)
            facts = [(c.pid, c.phase is Phase.IDLE, c.started) for c in live]
            shed = set(to_retire(facts, pool.target))
            for child in live:
                if child.pid in shed:
                    m.children.retire(child, now, "pool shrinks", grace)
            while len(m.children.of(pool.config.name)) < pool.target and now >= pool.next_spawn:
                self.spawn(pool, now)
                if pool.failures:
                    pool.next_spawn = now + respawn_delay(pool.failures)
                    break
        for child in m.children:
            if child.pool not in m.pools:
                m.children.retire(child, now, "pool removed", grace)

    def spawn(self, pool: PoolState, now: float) -> None:
        m = self.master
        child = m.children.spawn(m.config, pool, now, m.master_fds())
        m.db(
            lambda: m.store.register_process(
                child.name, m.host, child.pid, "worker", child.pool, m.name, m.node
            )
        )

    def scale(self, now: float) -> None:
        """Dynamic pools: count due jobs only where every child is busy (bounded, rare)."""
        m = self.master
        for pool in m.pools.values():
            cfg = pool.config
            kids = m.children.of(cfg.name)
            idle = [c for c in kids if c.is_idle()]
            ready = None
            if kids and not idle and cfg.name not in m.paused:  # all busy: is there a backlog?
                ready = m.db(partial(m.store.count_ready, cfg.name, 1000))
            view = PoolView(
                minimum=pool.minimum,
                maximum=pool.maximum,
                target=pool.target,
                live=len(kids),
                idle=len(idle),
                ready=ready,
                longest_idle=max((now - c.idle_since for c in idle), default=0.0),
            )
            new_target = plan_size(view)
            pool.saturated = bool(ready) and pool.target >= pool.maximum
            if new_target != pool.target:
                m.log.info(
                    "pool_resized", pool=cfg.name, size=new_target, was=pool.target, ready=ready
                )
                pool.target = new_target

    def resize_all(self, delta: int) -> None:
        """TTIN / TTOU: one more / one fewer child in every pool."""
        for pool in self.master.pools.values():
            pool.minimum = max(0, pool.minimum + delta)
            pool.maximum = (
                max(pool.maximum + delta, pool.minimum)
                if delta > 0
                else max(pool.minimum, pool.maximum + delta)
            )
            pool.target = max(pool.minimum, min(pool.target + delta, pool.maximum))
            self.master.log.info(
                "pool_resized",
                pool=pool.config.name,
                size=pool.target,
                by="SIGTTIN" if delta > 0 else "SIGTTOU",
            )

    def child_gone(self, child: Child, status: int, now: float) -> None:
        """Free its slot, count its jobs, and back off a pool whose children die at start."""
        self.count_finished(child)
        self.counted.pop(child.pid, None)
        pool = self.master.pools.get(child.pool)
        if pool is None:
            return
        pool.slots.discard(child.slot)
        pool.jobs_done += child.jobs
        exit_ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        if not failed_at_startup(now - child.started, exit_ok, child.reported, child.jobs):
            pool.failures = 0
            return
        pool.failures += 1
        pool.next_spawn = now + respawn_delay(pool.failures)
        event = events.POOL_CRASH_LOOP if pool.crash_looping else events.CHILD_FAILED_AT_START
        self.master.log.error(
            event,
            pool=child.pool,
            failures=pool.failures,
            retry_in=round(respawn_delay(pool.failures), 2),
        )

    def report_status(self) -> None:
        """The one-line status systemd shows (`systemctl status`)."""
        m = self.master
        busy = sum(1 for c in m.children if c.now_running is not None)
        jobs = sum(p.jobs_done for p in m.pools.values()) + sum(c.jobs for c in m.children)
        pools = ", ".join(
            f"{name} {len(m.children.of(name, retiring=True))}/{p.target}"
            for name, p in m.pools.items()
        )
        text = f"{len(m.children)} children ({busy} busy), {jobs} jobs done; pools: {pools}"
        if m.guard.error:
            text += "; database unreachable"
        systemd.status(text)

    # --- the poll and heartbeats ---------------------------------------------------------

    def poll(self) -> None:
        """One query for every pool: promote scheduled jobs about to fall due, and wake
        idle children whose queue has a due job."""
        m = self.master
        pools = sorted(set(m.pools) - m.paused)
        if not pools:
            return
        times = m.db(lambda: m.store.poll(pools))
        if not times:
            return
        if any(needs_promotion(t) or needs_demotion(t) for t in times.values()):
            m.db(lambda: keep_schedule(m.store, times))
        for child in m.children:
            due = times.get(child.pool)
            if child.is_idle() and due and due.ready_in is not None and due.ready_in <= 0:
                m.children.wake(child)

    def cancels(self, now: float) -> None:
        """Cancel requests for jobs our children hold. Only a child whose handler runs the
        job is killed (the job ends cancelled once it is reaped, Settling.settle_child); a
        job it holds unstarted never starts and ends cancelled now; one whose handler
        already succeeded is acknowledged (done); one whose outcome was written is ended
        cancelled (a failure's write does not take a cancelling row)."""
        m = self.master
        if not len(m.children):
            return
        asked = m.db(m.store.cancelling_jobs)
        if not asked:
            return
        holders = {c.name: c for c in m.children}
        for job_id, holder in asked:
            child = holders.get(holder)
            if child is None:
                continue
            found = child.ledger.find(job_id, child.board)
            if found is Holding.RUNNING:
                m.children.cancel(child, job_id, now)
            elif found is Holding.SUCCEEDED:
                m.db(partial(m.store.complete, holder, [job_id], child.on_success))
            elif found is Holding.UNKNOWN:
                continue  # a claim under way, or its lock held: the next look decides
            elif m.db(partial(m.store.finish_cancel, job_id)):
                m.log.warning(events.JOB_CANCELLED, job_id=job_id, child_pid=child.pid, held=found)

    def wake_named(self, queues: set[str]) -> None:
        """A local producer named these queues: wake one idle child of each, no query."""
        m = self.master
        for name in (queues & m.pools.keys()) - m.paused:
            idle = [c for c in m.children.of(name) if c.is_idle()]
            if idle:
                m.children.wake(idle[0])

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
        """One upsert per queue per heartbeat into this minute's row of this host."""
        m = self.master
        for child in m.children:
            self.count_finished(child)
        if not self.finished:
            return
        minute = (time.time() + m.clock_offset) // 60 * 60  # the database clock's minute
        counts = dict(self.finished)
        if m.db(lambda: m.store.record_throughput(minute, m.host, counts)) is not None:
            self.finished.clear()

    def heartbeat(self) -> None:
        m = self.master
        self.write_throughput()
        names = [m.name] + [c.name for c in m.children]
        beaten = m.db(lambda: m.store.beat(names))
        if beaten is None or beaten >= len(names):
            return
        # Rows lost (the database restored, or pruned while we were cut off): re-register.
        m.db(lambda: m.store.register_process(m.name, m.host, os.getpid(), "master", node=m.node))
        for c in m.children:
            register = m.store.register_process
            m.db(partial(register, c.name, m.host, c.pid, "worker", c.pool, m.name, m.node))
