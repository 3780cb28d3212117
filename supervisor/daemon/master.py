"""The arbiter: boot, the loop, signal dispatch, reload and stop.

The master has no threads. Signal handlers only queue the signal; `signal.set_wakeup_fd`
wakes the main loop's `select`, which also watches every child's status pipe, the check
tick's report and the same-host wake socket. It decides nothing by itself: decisions.py
says what to do and when (overtime, retiring, pool sizes, settle reasons), children.py
forks, reads, reaps and kills, dbguard.py keeps its database calls from blocking a stop
or a kill, and the check tick (ticks.py, cluster/tick.py) does the slow cluster work in
a process of its own. Its own queries are small (heartbeats, the poll, settling a reaped
child) and give up after DB_TIMEOUT, so neither a silent database nor a hung mail server
delays a stop or a kill by more than that.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import TypeVar

from supervisor import events, logs, wake
from supervisor.cluster.chores import CHORES_LOCK, settle_gone_worker, settle_owner
from supervisor.cluster.promote import PROMOTE_INTERVAL
from supervisor.cluster.tick import TickInput, tick_timeout
from supervisor.config import Config, load_config
from supervisor.daemon import systemd
from supervisor.daemon.children import Children
from supervisor.daemon.dbguard import DbGuard
from supervisor.daemon.decisions import settle_reason
from supervisor.daemon.pooling import Pooling
from supervisor.daemon.state import Child, PoolState
from supervisor.daemon.ticks import TickProcess
from supervisor.daemon.timers import Periodic
from supervisor.errors import ConfigError, ExitCode
from supervisor.observe import metrics
from supervisor.proc import (
    MASTER_SIGNALS,
    describe_exit,
    hostname,
    kill_group,
    node_id,
    process_name,
    set_title,
)
from supervisor.store import SCHEMA_VERSION, Store, open_store
from supervisor.work.command import load_handlers
from supervisor.work.descendants import become_subreaper

T = TypeVar("T")

SCALE_INTERVAL = 1.0  # seconds between pool-size decisions
CANCEL_INTERVAL = 1.0  # seconds between looks for cancel requests (SPEC: acted on within 2 s)
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
        self.store: Store = self.open_store(config)
        # The database clock minus ours, learned at boot and at every tick: schedules and
        # alert cooldowns are judged on the database clock, also while it cannot be read.
        self.clock_offset = 0.0
        self.started_at = time.time()  # schedules start here; on the DB clock after boot
        self.pools: dict[str, PoolState] = {p.name: PoolState(p) for p in config.pools}
        self.children = Children(self.log, self.host, self.name)
        self.signals: deque[int] = deque()
        self.stopping = False
        self.stop_deadline = 0.0
        self.unsettled: list[tuple[str, int | None, str, bool]] = []  # settle when the DB answers
        self.paused: set[str] = set()
        self.guard = DbGuard(
            self.log, DB_TIMEOUT, self.children.kill_overtime, self.stop_requested,
            self.children.next_kill,
        )  # fmt: skip
        self._wake_r, self._wake_w = os.pipe()
        self.listener: wake.WakeListener | None = None  # same-host nudges (wake.py)
        # The check tick runs on SIGALRM (every check_interval, set in install_signals):
        # the first one interval after boot, not at once, so the chores do not compete
        # with the first jobs of a restart (a lease left by a crash is no staler for 10 s).
        self.check_due = False
        self.tick: TickProcess | None = None
        self.alert_memory: dict[str, object] = {}  # host alert states, carried across ticks
        self.pooling = Pooling(self)
        self.make_timers(time.monotonic())

    def open_store(self, config: Config) -> Store:
        session = config.supervisor.db_session_timeout
        return open_store(config.database, timeout=DB_TIMEOUT, session_timeout=session)

    def make_timers(self, now: float) -> None:
        sup = self.config.supervisor
        self.beat_timer = Periodic(sup.heartbeat_interval, now, first=0.0)
        self.scale_timer = Periodic(SCALE_INTERVAL, now)
        self.poll_timer = Periodic(sup.poll_interval, now, first=0.0)
        self.promote_timer = Periodic(PROMOTE_INTERVAL, now, first=0.0)
        self.cancel_timer = Periodic(CANCEL_INTERVAL, now)
        watchdog = systemd.watchdog_interval()
        self.watchdog_timer = Periodic(watchdog, now, first=0.0) if watchdog else None

    @property
    def db_error(self) -> str | None:
        return self.guard.error

    def db(self, operation: Callable[[], T]) -> T | None:
        """A master DB call through the circuit breaker; None when it failed or was skipped."""
        return self.guard.call(operation)

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
                self.pooling.resize_all(+1 if sig == signal.SIGTTIN else -1)
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
        become_subreaper()  # what a hard-killed child's job leaves comes to us (kill_strays)
        self.listener = wake.listen(self.config.database, self.log)
        set_title("forkq: master")
        metrics.start(self.config, self.fds_for_fork)
        self.log.info(
            events.MASTER_STARTED,
            name=self.name,
            pools={p: s.config.workers for p, s in self.pools.items()},
            database=self.config.database.redacted(),
            pid=os.getpid(),
        )
        self.pooling.maintain(time.monotonic())
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
            self.log.info(events.STALE_PROCESSES_SETTLED, count=len(gone))

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        self.boot()
        while True:
            self.wait_for_events()
            metrics.loop_turned()  # /healthz: the loop turns
            self.handle_signals()
            now = time.monotonic()
            self.reap(now)
            if self.stopping:
                if self.finish_stop(now):
                    break
                continue
            self.children.kill_overtime(now)
            self.children.kill_unretired(now)
            self.periodic(now)
            # A stop that arrived during slow database calls is acted on before any spawn.
            self.handle_signals()
            if not self.stopping:
                self.pooling.maintain(time.monotonic())
        return self.shutdown()

    def fds_for_fork(self) -> list[int]:
        """What a process the master forks closes first (the metrics server too)."""
        return [*self.master_fds(), *self.children.fds()]

    def master_fds(self) -> list[int]:
        """What a forked child closes first: the master's own descriptors."""
        fds = [self._wake_r, self._wake_w]
        if self.listener is not None:
            fds.append(self.listener.fileno())
        if self.tick is not None and self.tick.report_r >= 0:
            fds.append(self.tick.report_r)
        return fds

    def wait_for_events(self) -> None:
        fds = [self._wake_r] + [c.status_r for c in self.children if c.status_r >= 0]
        if self.tick is not None and self.tick.report_r >= 0:
            fds.append(self.tick.report_r)
        if self.listener is not None:
            fds.append(self.listener.fileno())  # last: idle reports are read before nudges
        try:
            readable, _, _ = select.select(fds, [], [], min(MAX_SLEEP, self.next_deadline()))
        except InterruptedError:
            return
        now = time.monotonic()
        for fd in readable:
            if fd == self._wake_r:
                _drain(fd)
            elif self.tick is not None and fd == self.tick.report_r:
                if self.tick.read():
                    self.take_report(self.tick)
            elif self.listener is not None and fd == self.listener.fileno():
                self.pooling.wake_named(self.listener.drain())
            else:
                self.children.read(fd, now)

    def next_deadline(self) -> float:
        now = time.monotonic()
        if self.stopping:  # no timers run while stopping: only the deadline and the kills
            return max(0.0, self.stop_deadline - now)
        timers = [self.beat_timer, self.scale_timer, self.promote_timer, self.cancel_timer]
        if any(c.idle for c in self.children):
            timers.append(self.poll_timer)
        soonest = min(t.remaining(now) for t in timers)
        kill = self.children.next_kill()
        return soonest if kill is None else min(soonest, max(0.0, kill - now))

    def periodic(self, now: float) -> None:
        if self.watchdog_timer and self.watchdog_timer.due(now):
            systemd.watchdog()
        # Every poll_interval while a child is idle, and every PROMOTE_INTERVAL in any case:
        # scheduled jobs must become ready while every child is busy, too.
        idle = any(c.is_idle() for c in self.children)
        if (self.poll_timer.due(now) and idle) or self.promote_timer.due(now):
            self.promote_timer = Periodic(PROMOTE_INTERVAL, now)
            self.pooling.poll()
        if self.beat_timer.due(now):
            self.pooling.heartbeat()
        if self.scale_timer.due(now):
            self.pooling.scale(now)
            metrics.record_pools(
                {n: p.maximum for n, p in self.pools.items()},
                [(c.pool, c.now_running is not None) for c in self.children],
            )
        if self.cancel_timer.due(now):
            self.pooling.cancels(now)
        if self.check_due:
            self.check_due = False
            self.check_tick(now)

    # --- reaping and settling ------------------------------------------------------------

    def reap(self, now: float) -> None:
        for pid, status, child in self.children.reap():
            if self.tick is not None and pid == self.tick.pid:
                self.tick_exited(status)
            elif child is None:
                metrics.reaped(pid, status)  # the metrics server, or a stray (kill_strays)
            else:
                self.record_exit(child, status)
                self.log.info(
                    events.CHILD_EXITED,
                    pool=child.pool,
                    child_pid=pid,
                    status=describe_exit(status),
                    jobs=child.jobs,
                    reason=child.exit_reason or None,
                )
                self.settle_child(child, status)
                self.pooling.child_gone(child, status, now)
                child.board.close()
        self.kill_strays()

    def kill_strays(self) -> None:
        """Processes we never forked: what a job left behind when its child was SIGKILLed
        (no chance to sweep its descendants); the master is their subreaper. Direct
        children only, so a pid cannot be reused before we reap it."""
        known = {c.pid for c in self.children} | {metrics.server_pid(), None}
        if self.tick is not None:
            known.add(self.tick.pid)
        try:
            with open(f"/proc/self/task/{os.getpid()}/children") as listing:
                pids = [int(p) for p in listing.read().split()]
        except OSError:  # not Linux: nothing is adopted either
            return
        for pid in pids:
            if pid not in known:
                self.log.warning(events.STRAY_KILLED, pid=pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def record_exit(self, child: Child, status: int) -> None:
        metrics.child_exited(
            child.pool,
            exit_ok=os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
            retire_reason=child.exit_reason,
            timed_out=child.killed_job is not None,
            killed=child.killed_for_shutdown,
            cancelled=child.cancelled_job is not None,
        )
        if child.killed_job is not None and child.killed_job == child.now_running:
            metrics.job_settled(child.pool, "timeout")

    def settle_child(self, child: Child, status: int) -> None:
        """Settle what a dead child held, at once: its running job fails (attempt counted)
        unless we killed it for the operator's sake; what it had not started goes back."""
        running = child.now_running
        reason = settle_reason(
            running=running,
            killed_job=child.killed_job,
            killed_timeout=child.killed_timeout,
            killed_by_master=child.killed_for_shutdown,
            stopping=self.stopping,
            retire_reason=child.exit_reason,
            exit_description=describe_exit(status),
        )
        self.unsettled.append((child.name, running, reason.message, reason.counts_attempt))
        self.settle_pending()
        if child.cancelled_job is not None:
            metrics.job_settled(child.pool, "cancelled")
            cancelled = child.cancelled_job
            if self.db(lambda: self.store.finish_cancel(cancelled)):
                self.log.warning(events.JOB_CANCELLED, job_id=cancelled, child_pid=child.pid)
        self.db(lambda: self.store.remove_processes([child.name]))

    def settle_pending(self) -> None:
        while self.unsettled:
            name, job_id, error, counted = self.unsettled[0]
            if self.db(partial(settle_owner, self.store, name, job_id, error, counted)) is None:
                return  # database down: try again on the next tick
            self.unsettled.pop(0)
            if job_id is not None:
                self.log.warning(
                    events.JOB_SETTLED, job_id=job_id, error=error, attempt_counted=counted
                )

    # --- the check tick ------------------------------------------------------------------

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
        if self.stop_requested():  # no chores nor alerts while stopping
            return
        given = TickInput(
            host=self.host,
            owner=self.name,
            started_at=self.started_at,
            clock_offset=self.clock_offset,
            saturated_ticks={name: p.saturated_ticks for name, p in self.pools.items()},
            crash_looping={name for name, p in self.pools.items() if p.crash_looping},
            alert_memory=dict(self.alert_memory),
        )
        close = [*self.master_fds(), *self.children.fds()]
        self.tick = TickProcess.fork(self.config, given, now, close)

    def take_report(self, tick: TickProcess) -> None:
        if tick.unreadable:
            self.log.error("check_tick_report_unreadable", error=tick.unreadable)
        report = tick.report
        if report is None:
            return
        metrics.tick_report(report)
        self.alert_memory = report.alert_memory
        self.clock_offset = report.clock_offset
        if report.paused is not None:
            self.paused = set(report.paused)

    def tick_exited(self, status: int) -> None:
        tick, self.tick = self.tick, None
        if tick is None:
            return
        if tick.report_r >= 0:
            tick.drain()
            self.take_report(tick)
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            self.log.warning("check_tick_failed", status=describe_exit(status))
            return
        leader = bool(tick.report and tick.report.leader)
        took = round(time.monotonic() - tick.started, 3)
        self.log.info(events.CHECK_TICK, seconds=took, leader=leader)  # the tick's pulse

    def update_status(self) -> None:
        busy = sum(1 for c in self.children if c.now_running is not None)
        jobs = sum(p.jobs_done for p in self.pools.values()) + sum(c.jobs for c in self.children)
        pools = ", ".join(
            f"{name} {len(self.children.of(name, retiring=True))}/{p.target}"
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
            load_handlers(config, reload=True)
        except ConfigError as exc:
            self.log.error(events.RELOAD_REFUSED, error=str(exc))
            systemd.ready()
            return
        if config.database != self.config.database:
            self.store.close()
            self.store = self.open_store(config)
            if self.listener is not None:
                self.listener.close()
            self.listener = wake.listen(config.database, self.log)
        self.config = config
        metrics.reload(config)
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
        for child in self.children:
            self.children.retire(child, now, "reload", config.supervisor.shutdown_timeout)
        self.log.info(events.CONFIG_RELOADED, pools={p: s.target for p, s in self.pools.items()})
        systemd.ready()

    def begin_stop(self, graceful: bool, signame: str) -> None:
        if self.stopping and graceful:
            self.log.info("already_stopping", signal=signame)
            return
        self.stopping = True
        systemd.stopping()
        now = time.monotonic()
        grace = self.config.supervisor.shutdown_timeout
        self.stop_deadline = now + (grace if graceful else 0.0)
        self.log.info(
            "master_stopping",
            signal=signame,
            graceful=graceful,
            shutdown_timeout=grace,
            children=len(self.children),
        )
        if self.tick is not None:  # a tick mid-chore is rolled back; the lease is released below
            kill_group(self.tick.pid, signal.SIGKILL)
        for child in self.children:
            if graceful:
                self.children.retire(child, now, "shutdown", grace)
            else:
                self.children.kill(child)

    def finish_stop(self, now: float) -> bool:
        """True once every child is gone; past the deadline the rest are killed."""
        if not len(self.children) and self.tick is None:
            return True
        if now >= self.stop_deadline:
            for child in self.children:
                if not child.killed_for_shutdown:
                    self.log.warning(
                        events.CHILD_KILLED_AT_SHUTDOWN,
                        child_pid=child.pid,
                        job_id=child.now_running,
                    )
                    self.children.kill(child)
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
    metrics.boot(config)  # before any fork: children inherit where their metrics go
    try:
        load_handlers(config)
        master = Master(config, config_path)
        try:
            return master.run()
        except Exception:  # a defect of ours: say so in the log before the traceback
            master.log.error(events.MASTER_CRASHED, error=traceback.format_exc(limit=8))
            raise
    finally:
        metrics.shutdown()
