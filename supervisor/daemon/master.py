"""The arbiter: forks per-queue pools of children, reaps and respawns them, kills overtime.

The master has no threads. Signal handlers only queue the signal; `signal.set_wakeup_fd`
wakes the main loop's `select`, which also watches every child's status pipe. All
decisions about time use the monotonic clock and local state, so a database outage
never stops a kill. The master's own database connection is lazy and fork-aware; a
child never touches it. Its own queries are small (heartbeats, the poll, settling a
reaped child) and give up after MASTER_DB_TIMEOUT; everything slow (chores, schedules,
alerts with their mail and webhooks) runs in a check-tick process it forks (tick.py),
so neither a silent database nor a hung mail server delays a stop or a kill by more
than that.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import TypeVar

from supervisor import logs, registry, wake
from supervisor.cluster.chores import CHORES_LOCK, settle_gone_worker, settle_owner
from supervisor.cluster.promote import (
    PROMOTE_INTERVAL,
    keep_schedule,
    needs_demotion,
    needs_promotion,
)
from supervisor.cluster.tick import TickInput, TickReport, tick_main, tick_timeout
from supervisor.config import Config, load_config
from supervisor.daemon import systemd
from supervisor.daemon.child import ChildSpec, run_child
from supervisor.daemon.decisions import (
    Periodic,
    PoolView,
    failed_at_startup,
    may_retry_db,
    plan_size,
    respawn_delay,
    retire_deadline,
)
from supervisor.daemon.scoreboard import Scoreboard
from supervisor.daemon.state import Child, PoolState
from supervisor.errors import ConfigError, ConnectionLost, DatabaseError, ExitCode
from supervisor.proc import (
    MASTER_SIGNALS,
    describe_exit,
    hostname,
    kill_group,
    node_id,
    process_name,
    reap,
    set_title,
)
from supervisor.store import SCHEMA_VERSION, Store, open_store

T = TypeVar("T")


KILL_GRACE = 3.0  # seconds past a job's timeout (the child's own soft timeout) before SIGTERM
TERM_TO_KILL = 2.0  # seconds between SIGTERM and SIGKILL of an overtime child
SCALE_INTERVAL = 1.0  # seconds between pool-size decisions
MAX_SLEEP = 1.0  # the loop wakes at least this often (watchdog, deadlines)
# The master's own queries give up after this: a stop or an overtime kill waits at most
# this long on a silent database (SPEC: within 1 s). They are index dives and keyed writes.
DB_TIMEOUT = 0.75
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


class Master:
    def __init__(self, config: Config, config_path: str | None) -> None:
        self.config = config
        self.config_path = config_path
        self.host = hostname()
        self.node = node_id()  # the machine and pid namespace our pids mean something in
        self.name = process_name()
        self.log = logs.get(role="master")
        self.store: Store = open_store(
            config.database,
            timeout=DB_TIMEOUT,
            session_timeout=config.supervisor.db_session_timeout,
        )
        # The database clock minus ours, learned at boot and at every tick: schedules and
        # alert cooldowns are judged on the database clock, also while it cannot be read.
        self.clock_offset = 0.0
        self.started_at = time.time()  # schedules start here; on the DB clock after boot
        self.pools: dict[str, PoolState] = {p.name: PoolState(p) for p in config.pools}
        self.children: dict[int, Child] = {}
        self.signals: deque[int] = deque()
        self.stopping = False
        self.stop_deadline = 0.0
        self.unsettled: list[tuple[str, int | None, str, bool]] = []  # settle when the DB answers
        self.paused: set[str] = set()
        self.db_error: str | None = None  # set while the database is unreachable
        self.db_backoff = 0.0
        self.db_retry_at = 0.0
        self._wake_r, self._wake_w = os.pipe()
        self.listener: wake.WakeListener | None = None  # same-host nudges (wake.py)
        # The check tick runs on SIGALRM (every check_interval, set in install_signals):
        # the first one interval after boot, not at once, so the chores do not compete
        # with the first jobs of a restart (a lease left by a crash is no staler for 10 s).
        self.check_due = False
        self.tick: TickProcess | None = None
        self.alert_memory: dict[str, object] = {}  # host alert states, carried across ticks
        self.make_timers(time.monotonic())

    def make_timers(self, now: float) -> None:
        sup = self.config.supervisor
        self.beat_timer = Periodic(sup.heartbeat_interval, now, first=0.0)
        self.scale_timer = Periodic(SCALE_INTERVAL, now)
        self.poll_timer = Periodic(sup.poll_interval, now, first=0.0)
        self.promote_timer = Periodic(PROMOTE_INTERVAL, now, first=0.0)
        watchdog = systemd.watchdog_interval()
        self.watchdog_timer = Periodic(watchdog, now, first=0.0) if watchdog else None

    # --- signals -------------------------------------------------------------------------

    def install_signals(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in MASTER_SIGNALS:
            signal.signal(sig, self._queue_signal)
        self.arm_check_timer()

    def arm_check_timer(self) -> None:
        interval = self.config.supervisor.check_interval
        signal.setitimer(signal.ITIMER_REAL, interval, interval)

    def _queue_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)  # nothing else here: the loop acts

    def stop_requested(self) -> bool:
        return self.stopping or any(sig in STOP_SIGNALS for sig in self.signals)

    def handle_signals(self) -> None:
        while self.signals:
            sig = self.signals.popleft()
            if sig in (signal.SIGTERM, signal.SIGINT):
                self.begin_stop(graceful=True, signame=signal.Signals(sig).name)
            elif sig == signal.SIGQUIT:
                self.begin_stop(graceful=False, signame="SIGQUIT")
            elif sig == signal.SIGHUP:
                self.reload()
            elif sig in (signal.SIGTTIN, signal.SIGTTOU):
                self.resize_all(+1 if sig == signal.SIGTTIN else -1)
            elif sig == signal.SIGALRM:
                self.check_due = True  # the check tick starts on this loop turn

    # --- boot ----------------------------------------------------------------------------

    def boot(self) -> None:
        version = self.store.require_schema()
        if version < SCHEMA_VERSION:
            self.log.warning(
                "schema_upgrade_available",
                version=version,
                latest=SCHEMA_VERSION,
                note="run `forkq schema apply`",
            )
        self.clock_offset = self.store.db_now() - time.time()
        self.started_at = time.time() + self.clock_offset
        self.store.register_process(self.name, self.host, os.getpid(), "master", node=self.node)
        self.settle_dead_local_processes()
        self.install_signals()
        self.listener = wake.listen(self.config.database, self.log)
        set_title("forkq: master")
        self.log.info(
            "master_started",
            name=self.name,
            pools={p: s.config.workers for p, s in self.pools.items()},
            database=self.config.database.redacted(),
            pid=os.getpid(),
        )
        self.maintain_pools(time.monotonic())
        systemd.ready()
        self.update_status()

    def settle_dead_local_processes(self) -> None:
        """Rows of this node whose pid is gone (a previous master killed -9): settle them now.

        Only rows of our node (proc.node_id): a pid says nothing about another machine
        or container, even one with our hostname. Those rows, and rows without a node,
        are left to the stale-heartbeat path.
        """
        gone = [
            p for p in self.store.list_processes() if p.node == self.node and not _pid_alive(p.pid)
        ]
        for process in gone:
            if process.role == "worker":
                settle_gone_worker(self.store, process.name, "worker gone (found at master start)")
        self.store.remove_processes([p.name for p in gone])
        if gone:
            self.log.info("stale_processes_settled", count=len(gone))

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        self.boot()
        while True:
            self.wait_for_events()
            self.handle_signals()
            now = time.monotonic()
            self.reap_children(now)
            if self.stopping:
                if self.finish_stop(now):
                    break
            else:
                self.kill_overtime(now)
                self.kill_unretired(now)
                self.periodic(now)
                # A stop that arrived during slow database calls is acted on before any spawn.
                self.handle_signals()
                if not self.stopping:
                    self.maintain_pools(time.monotonic())
        return self.shutdown()

    def wait_for_events(self) -> None:
        fds = [self._wake_r] + [c.status_r for c in self.children.values() if c.status_r >= 0]
        if self.tick is not None and self.tick.report_r >= 0:
            fds.append(self.tick.report_r)
        if self.listener is not None:
            fds.append(self.listener.fileno())  # last: idle reports are read before nudges
        timeout = min(MAX_SLEEP, self.next_deadline())
        try:
            readable, _, _ = select.select(fds, [], [], timeout)
        except InterruptedError:
            return
        for fd in readable:
            if fd == self._wake_r:
                _drain(fd)
            elif self.tick is not None and fd == self.tick.report_r:
                self.read_tick()
            elif self.listener is not None and fd == self.listener.fileno():
                self.wake_named(self.listener.drain())
            else:
                self.read_child(fd)

    def next_deadline(self) -> float:
        now = time.monotonic()
        if self.stopping:  # no timers run while stopping: only the deadline and the kills
            return max(0.0, self.stop_deadline - now)
        timers = [self.beat_timer, self.scale_timer, self.promote_timer]
        if any(c.idle for c in self.children.values()):
            timers.append(self.poll_timer)
        soonest = min(t.remaining(now) for t in timers)
        retire_by = min((c.retire_by for c in self.children.values() if c.retiring), default=None)
        dues = [d for d in (self.next_kill(), retire_by) if d is not None]
        return min([soonest, *(max(0.0, d - now) for d in dues)])

    def next_kill(self) -> float | None:
        """When the next signal to an overtime child is due (monotonic), if any."""
        dues = []
        for child in self.children.values():
            if child.term_sent_at:
                if child.kill_at:
                    dues.append(child.kill_at)
                continue
            entry = child.board.read()
            if entry.job_id:
                dues.append(entry.deadline + KILL_GRACE)
        return min(dues, default=None)

    def read_child(self, fd: int) -> None:
        child = next((c for c in self.children.values() if c.status_r == fd), None)
        if child is None:
            return
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not data:  # EOF: the child is exiting; SIGCHLD will follow
            os.close(fd)
            child.status_r = -1
            return
        child.buffer += data
        *lines, child.buffer = child.buffer.split(b"\n")
        now = time.monotonic()
        for line in lines:
            child.on_message(line.decode(errors="replace"), now)

    # --- children ------------------------------------------------------------------------

    def spawn(self, pool: PoolState, now: float) -> None:
        slot = pool.free_slot()
        status_r, status_w = os.pipe()
        wake_r, wake_w = os.pipe()
        token = process_name().rsplit(":", 1)[1]
        board = Scoreboard()
        sys.stdout.flush()
        sys.stderr.flush()
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, MASTER_SIGNALS)
        pid = os.fork()
        if pid == 0:
            spec = ChildSpec(
                pool.config,
                slot,
                f"{self.host}:{os.getpid()}:{token}",
                os.getppid(),
                status_w,
                wake_r,
                board,
                self.name,
            )
            inherited = [status_r, wake_w, *self.master_fds()]
            for other in self.children.values():
                inherited += [fd for fd in (other.status_r, other.wake_w) if fd >= 0]
            run_child(self.config, spec, inherited)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        with contextlib.suppress(OSError):  # the child does it too; whoever runs first wins
            os.setpgid(pid, pid)
        os.close(status_w)
        os.close(wake_r)
        os.set_blocking(status_r, False)
        os.set_blocking(wake_w, False)
        child = Child(
            pid=pid,
            name=f"{self.host}:{pid}:{token}",
            pool=pool.config.name,
            slot=slot,
            status_r=status_r,
            wake_w=wake_w,
            started=now,
            board=board,
        )
        self.children[pid] = child
        pool.slots.add(slot)
        self.log.info("child_spawned", pool=child.pool, child_pid=pid, slot=slot)
        self.db(
            lambda: self.store.register_process(
                child.name, self.host, pid, "worker", child.pool, self.name, self.node
            )
        )

    def master_fds(self) -> list[int]:
        """What a forked child closes first: the master's own descriptors."""
        fds = [self._wake_r, self._wake_w]
        if self.listener is not None:
            fds.append(self.listener.fileno())
        if self.tick is not None and self.tick.report_r >= 0:
            fds.append(self.tick.report_r)
        return fds

    def reap_children(self, now: float) -> None:
        for pid, status in reap():
            if self.tick is not None and pid == self.tick.pid:
                self.tick_exited(status)
                continue
            child = self.children.pop(pid, None)
            if child is None:
                continue
            self.close_child_fds(child)
            pool = self.pools.get(child.pool)
            if pool:
                pool.slots.discard(child.slot)
                pool.jobs_done += child.jobs
            exit_ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
            self.log.info(
                "child_exited",
                pool=child.pool,
                child_pid=pid,
                status=describe_exit(status),
                jobs=child.jobs,
                reason=child.exit_reason or None,
            )
            self.settle_child(child, status)
            if pool and failed_at_startup(now - child.started, exit_ok, child.reported, child.jobs):
                pool.failures += 1
                pool.next_spawn = now + respawn_delay(pool.failures)
                event = "pool_crash_loop" if pool.crash_looping else "child_failed_at_start"
                self.log.error(
                    event,
                    pool=child.pool,
                    failures=pool.failures,
                    retry_in=round(respawn_delay(pool.failures), 2),
                )
            elif pool:
                pool.failures = 0
            child.board.close()

    def settle_child(self, child: Child, status: int) -> None:
        """Settle what a dead child held, at once: its running job fails (attempt counted)
        unless we killed it for shutdown; what it had not started goes back to ready."""
        running = child.now_running
        if child.killed_job is not None and running == child.killed_job:
            error, counted = f"killed after {child.killed_timeout:g}s timeout", True
        elif child.killed_for_shutdown and self.stopping:
            error, counted = "killed at shutdown", False
        elif child.killed_for_shutdown:
            error, counted = f"killed: did not exit when retired ({child.exit_reason})", False
        else:
            error, counted = f"worker died ({describe_exit(status)})", True
        self.unsettled.append((child.name, running, error, counted))
        self.settle_pending()
        self.db(lambda: self.store.remove_processes([child.name]))

    def settle_pending(self) -> None:
        while self.unsettled:
            name, job_id, error, counted = self.unsettled[0]
            if self.db(partial(settle_owner, self.store, name, job_id, error, counted)) is None:
                return  # database down: try again on the next tick
            self.unsettled.pop(0)
            if job_id is not None:
                self.log.warning("job_settled", job_id=job_id, error=error, attempt_counted=counted)

    def close_child_fds(self, child: Child) -> None:
        for fd in (child.status_r, child.wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        child.status_r = child.wake_w = -1

    def kill_overtime(self, now: float) -> None:
        """Two stages, from local state only (the scoreboard): SIGTERM the group, then SIGKILL."""
        for child in self.children.values():
            if child.term_sent_at is not None:
                if child.kill_at and now >= child.kill_at:
                    kill_group(child.pid, signal.SIGKILL)
                    child.kill_at = 0.0
                continue
            entry = child.board.read()
            if entry.job_id is None or now < entry.deadline + KILL_GRACE:
                continue
            child.killed_job, child.killed_timeout = entry.job_id, entry.timeout
            self.log.warning(
                "job_timed_out",
                pool=child.pool,
                child_pid=child.pid,
                job_id=entry.job_id,
                timeout=entry.timeout,
            )
            kill_group(child.pid, signal.SIGTERM)
            child.term_sent_at = now
            child.kill_at = now + TERM_TO_KILL

    def retire(self, child: Child, now: float, reason: str) -> None:
        """Ask a child to finish its current job and exit (shrink, HUP, TTOU)."""
        if child.retiring:
            return
        child.retiring = True
        entry = child.board.read()
        job_ends_by = entry.deadline + KILL_GRACE + TERM_TO_KILL if entry.job_id else None
        grace = self.config.supervisor.shutdown_timeout
        child.retire_by = retire_deadline(now, grace, job_ends_by)
        child.exit_reason = reason
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGTERM)

    def kill_unretired(self, now: float) -> None:
        """Retiring children still alive past their deadline ignored SIGTERM: kill them
        (what they held goes back to ready uncounted, as at shutdown)."""
        for child in self.children.values():
            if child.retiring and not child.killed_for_shutdown and now >= child.retire_by:
                self.log.warning(
                    "child_ignored_retire",
                    pool=child.pool,
                    child_pid=child.pid,
                    job_id=child.now_running,
                )
                child.killed_for_shutdown = True
                kill_group(child.pid, signal.SIGKILL)

    # --- pools ---------------------------------------------------------------------------

    def maintain_pools(self, now: float) -> None:
        for pool in self.pools.values():
            live = [
                c for c in self.children.values() if c.pool == pool.config.name and not c.retiring
            ]
            excess = len(live) - pool.target
            if excess > 0:  # retire the idle first, the newest first
                for child in sorted(live, key=lambda c: (not c.idle, -c.started))[:excess]:
                    self.retire(child, now, "pool shrinks")
            while len(live) < pool.target and now >= pool.next_spawn:
                self.spawn(pool, now)
                live = [
                    c
                    for c in self.children.values()
                    if c.pool == pool.config.name and not c.retiring
                ]
                if pool.failures:
                    pool.next_spawn = now + respawn_delay(pool.failures)
                    break
        for child in list(self.children.values()):
            if child.pool not in self.pools:
                self.retire(child, now, "pool removed")

    def scale(self, now: float) -> None:
        """Dynamic pools: count due jobs only where every child is busy (bounded, rare)."""
        for pool in self.pools.values():
            cfg = pool.config
            kids = [c for c in self.children.values() if c.pool == cfg.name and not c.retiring]
            idle = [c for c in kids if c.is_idle()]
            ready = None
            if kids and not idle and cfg.name not in self.paused:  # all busy: is there a backlog?
                ready = self.db(partial(self.store.count_ready, cfg.name, 1000))
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
                self.log.info(
                    "pool_resized", pool=cfg.name, size=new_target, was=pool.target, ready=ready
                )
                pool.target = new_target

    def resize_all(self, delta: int) -> None:
        for pool in self.pools.values():
            pool.minimum = max(0, pool.minimum + delta)
            pool.maximum = (
                max(pool.maximum + delta, pool.minimum)
                if delta > 0
                else max(pool.minimum, pool.maximum + delta)
            )
            pool.target = max(pool.minimum, min(pool.target + delta, pool.maximum))
            self.log.info(
                "pool_resized",
                pool=pool.config.name,
                size=pool.target,
                by="SIGTTIN" if delta > 0 else "SIGTTOU",
            )

    # --- periodic work -------------------------------------------------------------------

    def periodic(self, now: float) -> None:
        if self.watchdog_timer and self.watchdog_timer.due(now):
            systemd.watchdog()
        # Every poll_interval while a child is idle, and every PROMOTE_INTERVAL in any case:
        # scheduled jobs must become ready while every child is busy, too.
        idle = any(c.is_idle() for c in self.children.values())
        if (self.poll_timer.due(now) and idle) or self.promote_timer.due(now):
            self.promote_timer = Periodic(PROMOTE_INTERVAL, now)
            self.poll()
        if self.beat_timer.due(now):
            self.heartbeat()
        if self.scale_timer.due(now):
            self.scale(now)
        if self.check_due:
            self.check_due = False
            self.check_tick(now)

    def poll(self) -> None:
        """One query for every pool: promote scheduled jobs about to fall due, and wake
        idle children whose queue has a due job."""
        pools = sorted(set(self.pools) - self.paused)
        if not pools:
            return
        times = self.db(lambda: self.store.poll(pools))
        if not times:
            return
        if any(needs_promotion(t) or needs_demotion(t) for t in times.values()):
            self.db(lambda: keep_schedule(self.store, times))
        for child in self.children.values():
            due = times.get(child.pool)
            if (
                child.is_idle()
                and due is not None
                and due.ready_in is not None
                and due.ready_in <= 0
            ):
                self.wake(child)

    def wake_named(self, queues: set[str]) -> None:
        """A local producer named these queues: wake one idle child of each, no query."""
        for name in (queues & self.pools.keys()) - self.paused:
            idle = [c for c in self.children.values() if c.pool == name and c.is_idle()]
            if idle:
                self.wake(idle[0])

    def wake(self, child: Child) -> None:
        try:
            os.write(child.wake_w, b"w")
            child.idle = False  # it reports idle again if it finds nothing
        except (BlockingIOError, BrokenPipeError):
            pass

    def heartbeat(self) -> None:
        names = [self.name] + [c.name for c in self.children.values()]
        beaten = self.db(lambda: self.store.beat(names))
        if beaten is not None and beaten < len(
            names
        ):  # rows lost (DB restored, pruned): re-register
            self.db(
                lambda: self.store.register_process(
                    self.name, self.host, os.getpid(), "master", node=self.node
                )
            )
            for c in self.children.values():
                self.db(
                    partial(
                        self.store.register_process,
                        c.name,
                        self.host,
                        c.pid,
                        "worker",
                        c.pool,
                        self.name,
                        self.node,
                    )
                )

    def check_tick(self, now: float) -> None:
        for pool in self.pools.values():  # counted in check ticks, as the alert rule says
            pool.saturated_ticks = pool.saturated_ticks + 1 if pool.saturated else 0
        self.settle_pending()
        self.update_status()
        if self.tick is not None:  # one at a time; a hung one is killed
            if now - self.tick.started > tick_timeout(self.config.supervisor.check_interval):
                self.log.warning("check_tick_killed", tick_pid=self.tick.pid)
                kill_group(self.tick.pid, signal.SIGKILL)
            return
        if not self.stop_requested():  # no chores nor alerts while stopping
            self.spawn_tick(now)

    def spawn_tick(self, now: float) -> None:
        given = TickInput(
            host=self.host,
            owner=self.name,
            started_at=self.started_at,
            clock_offset=self.clock_offset,
            saturated_ticks={name: p.saturated_ticks for name, p in self.pools.items()},
            crash_looping={name for name, p in self.pools.items() if p.crash_looping},
            alert_memory=dict(self.alert_memory),
        )
        report_r, report_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, MASTER_SIGNALS)
        pid = os.fork()
        if pid == 0:
            inherited = [report_r, *self.master_fds()]
            for other in self.children.values():
                inherited += [fd for fd in (other.status_r, other.wake_w) if fd >= 0]
            tick_main(self.config, given, report_w, inherited)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        os.close(report_w)
        os.set_blocking(report_r, False)
        self.tick = TickProcess(pid, report_r, now)

    def read_tick(self) -> None:
        if self.tick is not None:
            self.read_report(self.tick)

    def read_report(self, tick: TickProcess) -> None:
        try:
            data = os.read(tick.report_r, 65536)
        except BlockingIOError:
            return
        tick.buffer += data
        if data:
            return
        os.close(tick.report_r)
        tick.report_r = -1
        if not tick.buffer:
            return
        try:
            report = TickReport.decode(tick.buffer)
        except (ValueError, TypeError, KeyError) as exc:
            self.log.error("check_tick_report_unreadable", error=str(exc)[:200])
            return
        self.alert_memory = report.alert_memory
        self.clock_offset = report.clock_offset
        tick.leader = report.leader
        if report.paused is not None:
            self.paused = set(report.paused)

    def tick_exited(self, status: int) -> None:
        tick, self.tick = self.tick, None
        while tick is not None and tick.report_r >= 0:  # what is left in the pipe, to EOF
            try:
                self.read_report(tick)
            except OSError:
                os.close(tick.report_r)
                tick.report_r = -1
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            self.log.warning("check_tick_failed", status=describe_exit(status))
        elif tick is not None:  # one line per check_interval: the tick's pulse, for operators
            took = round(time.monotonic() - tick.started, 3)
            self.log.info("check_tick", seconds=took, leader=tick.leader)

    def db(self, operation: Callable[[], T]) -> T | None:
        """Run a master DB call; None when it failed.

        While the database is unreachable, calls are skipped until a back-off retry
        time: a silent server makes each call block for DB_TIMEOUT, and a loop turn
        makes several calls, which must not delay kills and signals for long. Once a
        stop is asked for, an unreachable database is not tried again at all: what is
        left unsettled is settled by the next master's boot or by lease expiry.
        """
        now = time.monotonic()
        self.kill_overtime(now)  # a slow database never delays an overtime kill
        if self.db_error is not None and not may_retry_db(
            now, self.db_retry_at, self.stop_requested(), self.next_kill(), DB_TIMEOUT
        ):
            return None
        try:
            result = operation()
        except ConnectionLost as exc:
            if self.db_error is None:
                self.log.error("db_unreachable", error=str(exc))
            self.db_error = str(exc)
            self.db_backoff = min(DB_TIMEOUT, max(0.5, self.db_backoff * 2))
            self.db_retry_at = time.monotonic() + self.db_backoff
            return None
        except DatabaseError as exc:  # reachable, but this call failed (e.g. a deadlock)
            self.log.warning("db_call_failed", error=str(exc))
            return None
        if self.db_error is not None:
            self.log.info("db_reachable_again")
            self.db_error, self.db_backoff = None, 0.0
        return result

    def update_status(self) -> None:
        busy = sum(1 for c in self.children.values() if c.now_running is not None)
        jobs = sum(p.jobs_done for p in self.pools.values()) + sum(
            c.jobs for c in self.children.values()
        )
        pools = ", ".join(
            f"{name} {sum(1 for c in self.children.values() if c.pool == name)}/{p.target}"
            for name, p in self.pools.items()
        )
        text = f"{len(self.children)} children ({busy} busy), {jobs} jobs done; pools: {pools}"
        if self.db_error:
            text += "; database unreachable"
        systemd.status(text)

    # --- reload and stop -----------------------------------------------------------------

    def reload(self) -> None:
        """HUP: re-read config and handlers; replace every child gracefully."""
        systemd.reloading()
        try:
            config = load_config(self.config_path) if self.config_path else self.config
            registry.load_modules(config.supervisor.handlers, reload=True, source=config.source)
        except ConfigError as exc:
            self.log.error("reload_refused", error=str(exc))
            systemd.ready()
            return
        if config.database != self.config.database:
            self.store.close()
            self.store = open_store(
                config.database,
                timeout=DB_TIMEOUT,
                session_timeout=config.supervisor.db_session_timeout,
            )
            if self.listener is not None:
                self.listener.close()
            self.listener = wake.listen(config.database, self.log)
        self.config = config
        # New intervals take effect now; the next tick takes the new chores lease.
        self.make_timers(time.monotonic())
        self.arm_check_timer()
        old = self.pools
        self.pools = {}
        for pool_config in config.pools:
            state = PoolState(pool_config)
            if pool_config.name in old:
                state.slots = old[pool_config.name].slots
            self.pools[pool_config.name] = state
        now = time.monotonic()
        for child in list(self.children.values()):
            self.retire(child, now, "reload")
        self.log.info("config_reloaded", pools={p: s.target for p, s in self.pools.items()})
        systemd.ready()

    def begin_stop(self, graceful: bool, signame: str) -> None:
        if self.stopping and graceful:
            self.log.info("already_stopping", signal=signame)
            return
        self.stopping = True
        systemd.stopping()
        now = time.monotonic()
        self.stop_deadline = now + (self.config.supervisor.shutdown_timeout if graceful else 0.0)
        self.log.info(
            "master_stopping",
            signal=signame,
            graceful=graceful,
            shutdown_timeout=self.config.supervisor.shutdown_timeout,
            children=len(self.children),
        )
        if self.tick is not None:  # a tick mid-chore is rolled back; the lease is released below
            kill_group(self.tick.pid, signal.SIGKILL)
        for child in self.children.values():
            if graceful:
                self.retire(child, now, "shutdown")
            else:
                child.killed_for_shutdown = True
                kill_group(child.pid, signal.SIGKILL)

    def finish_stop(self, now: float) -> bool:
        """True once every child is gone; past the deadline the rest are killed."""
        if not self.children and self.tick is None:
            return True
        if now >= self.stop_deadline:
            for child in self.children.values():
                if not child.killed_for_shutdown:
                    child.killed_for_shutdown = True
                    self.log.warning(
                        "child_killed_at_shutdown", child_pid=child.pid, job_id=child.now_running
                    )
                    kill_group(child.pid, signal.SIGKILL)
        return False

    def shutdown(self) -> int:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        self.settle_pending()
        self.db(lambda: self.store.remove_processes([self.name]))
        self.db(lambda: self.store.release_lock(CHORES_LOCK, self.name))
        self.store.close()
        self.log.info("master_stopped", unsettled=len(self.unsettled))
        return int(ExitCode.OK)


def _pid_alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan init has not reaped yet is gone for us)."""
    import psutil  # imported on first use, not at boot (the first fork waits for imports)

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def run_daemon(config: Config, config_path: str | None) -> int:
    """`forkq run`: import handlers before any fork (a broken module fails the boot), then arbitrate."""
    registry.load_modules(config.supervisor.handlers, source=config.source)
    return Master(config, config_path).run()


class TickProcess:
    """The running check tick: its pid and the pipe its report comes on."""

    def __init__(self, pid: int, report_r: int, started: float) -> None:
        self.pid = pid
        self.report_r = report_r
        self.started = started
        self.buffer = b""
        self.leader = False  # from its report
