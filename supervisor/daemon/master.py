"""The arbiter: boot, the loop, signal dispatch, reload and stop.

The master has no threads. Signal handlers only queue the signal; `signal.set_wakeup_fd`
wakes the main loop's `select`, which also watches every child's status pipe, the check
tick's report and the same-host wake socket. It decides nothing by itself: decisions.py
says what to do and when, children.py forks, reaps and kills, handback.py takes back what
a busy child holds, booting.py waits for the database at boot, dbguard.py keeps later
database calls from blocking a stop or a kill, and the check tick (ticks.py,
cluster/tick.py) does the slow cluster work in a process of its own.
"""

from __future__ import annotations

import os
import select
import signal
import time
import traceback
from collections.abc import Callable
from typing import TypeVar

from supervisor import events, logs, wake
from supervisor.cluster.chores import CHORES_LOCK
from supervisor.config import Config, load_config
from supervisor.daemon import systemd
from supervisor.daemon.booting import require_latest_schema, wait_for_database
from supervisor.daemon.children import Children
from supervisor.daemon.dbguard import DbGuard
from supervisor.daemon.handback import HandBacks
from supervisor.daemon.pooling import Pooling
from supervisor.daemon.settling import Settling
from supervisor.daemon.signals import SignalQueue, arm_check_timer, disarm_check_timer
from supervisor.daemon.state import Phase, PoolState, reloaded_pools
from supervisor.daemon.ticks import CheckTicks
from supervisor.daemon.timers import LoopTimers
from supervisor.errors import ConfigError, ExitCode, SchemaError
from supervisor.observe import metrics
from supervisor.proc import hostname, node_id, process_name, set_title
from supervisor.store import Store, open_store
from supervisor.work.command import load_handlers
from supervisor.work.descendants import become_subreaper

T = TypeVar("T")

MAX_SLEEP = 1.0  # the loop wakes at least this often (watchdog, deadlines)
# The master's own queries give up after this: a stop or an overtime kill waits at most
# this long on a silent database (SPEC: within 1 s). They are index dives and keyed writes.
DB_TIMEOUT = 0.75
STOP_MARGIN = 5.0  # seconds past shutdown_timeout the stop may take (settling, kills, close)


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
        self.signals = SignalQueue()
        self.stopping = False
        self.stop_deadline = 0.0
        self.paused: set[str] = set()
        self.guard = DbGuard(
            self.log, DB_TIMEOUT, self.children.kill_overtime, self.stop_requested,
            self.children.next_kill,
        )  # fmt: skip
        self.listener: wake.WakeListener | None = None  # same-host nudges (wake.py)
        # The check tick runs on SIGALRM every check_interval, the first one interval after
        # boot: the chores do not compete with the first jobs of a restart.
        self.check_due = False
        self.ticks = CheckTicks(self)
        self.pooling = Pooling(self)
        self.settling = Settling(self)
        write = lambda owner, taken: self.db(lambda: self.store.hand_back(owner, taken))  # noqa: E731
        self.handbacks = HandBacks(self.children, write, self.log)
        self.timers = LoopTimers.make(
            config.supervisor, time.monotonic(), systemd.watchdog_interval()
        )

    def open_store(self, config: Config) -> Store:
        session = config.supervisor.db_session_timeout
        return open_store(config.database, timeout=DB_TIMEOUT, session_timeout=session)

    def db(self, operation: Callable[[], T]) -> T | None:
        """A master DB call through the circuit breaker; None when it failed or was skipped."""
        return self.guard.call(operation)

    # --- signals -------------------------------------------------------------------------

    def stop_requested(self) -> bool:
        return self.stopping or self.signals.stop_pending()

    def handle_signals(self) -> None:
        while self.signals.pending:
            sig = self.signals.pending.popleft()
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

    def boot(self) -> bool:
        """False when a stop signal arrived while the database was waited for."""
        self.signals.install(self.config.supervisor.check_interval)  # a stop ends the wait
        if wait_for_database(self.log, self.signals, self.boot_db) is None:
            return False
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
        self.pooling.report_status()
        return True

    def boot_db(self) -> int:
        """The boot's database calls, tried again as a whole while the database is not ready."""
        version = require_latest_schema(self.store)
        self.clock_offset = self.store.db_now() - time.time()
        self.started_at = time.time() + self.clock_offset
        self.store.register_process(self.name, self.host, os.getpid(), "master", node=self.node)
        self.settling.settle_dead_local_processes()
        return version

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        if not self.boot():
            return self.shutdown()
        while True:
            self.wait_for_events()
            metrics.loop_turned(self.guard.answered_at, self.guard.error is not None)  # /healthz
            self.handle_signals()
            now = time.monotonic()
            self.reap(now)
            self.handbacks.run(now)  # a drain hands back too: those jobs go to other hosts
            if self.stopping:
                if self.finish_stop(now):
                    break
                if self.timers.cancel.due(now):
                    self.pooling.cancels(now)  # a cancel is carried out during a drain too
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
        fds = self.signals.fds()
        if self.listener is not None:
            fds.append(self.listener.fileno())
        return fds + self.ticks.fds()

    def wait_for_events(self) -> None:
        fds = [self.signals.wake_r] + [c.status_r for c in self.children if c.status_r >= 0]
        fds += self.ticks.fds()
        if self.listener is not None:
            fds.append(self.listener.fileno())  # last: idle reports are read before nudges
        try:
            readable, _, _ = select.select(fds, [], [], min(MAX_SLEEP, self.next_deadline()))
        except InterruptedError:
            return
        now = time.monotonic()
        for fd in readable:
            if fd == self.signals.wake_r:
                self.signals.drain_wakeups()
            elif fd in self.ticks.fds():
                self.ticks.readable()
            elif self.listener is not None and fd == self.listener.fileno():
                self.pooling.wake_named(self.listener.drain())
            else:
                self.children.read(fd, now)

    def next_deadline(self) -> float:
        now = time.monotonic()
        dues = [self.children.next_kill(), self.handbacks.next_due()]
        if self.stopping:  # no timers run while stopping but cancels, hand-backs and kills
            dues += [self.stop_deadline, self.timers.cancel.next]
        else:
            idle = any(c.phase is Phase.IDLE for c in self.children)
            dues.append(now + self.timers.remaining(now, idle))
        return max(0.0, min(d for d in dues if d is not None) - now)

    def periodic(self, now: float) -> None:
        timers = self.timers
        if timers.watchdog and timers.watchdog.due(now):
            systemd.watchdog()
        if timers.poll_due(now, any(c.is_idle() for c in self.children)):
            self.pooling.poll()
        if timers.beat.due(now):
            self.pooling.heartbeat()
        if timers.scale.due(now):
            self.pooling.scale(now)
            metrics.record_pools(
                {n: p.maximum for n, p in self.pools.items()},
                [(c.pool, c.now_running is not None) for c in self.children],
            )
        if timers.cancel.due(now):
            self.pooling.cancels(now)
        if self.check_due:
            self.check_due = False
            self.check_tick(now)

    # --- reaping and settling ------------------------------------------------------------

    def reap(self, now: float) -> None:
        for pid, status, child in self.children.reap():
            if pid == self.ticks.pid:
                self.ticks.exited(status)
            elif child is None:
                metrics.reaped(pid, status)  # the metrics server, or a stray (kill_strays)
            else:
                self.handbacks.write_pending()  # its successes taken back, before settling
                self.settling.child_exited(child, status)
                self.pooling.child_gone(child, status, now)
                child.close()
        self.children.kill_strays({metrics.server_pid(), self.ticks.pid})

    # --- the check tick ------------------------------------------------------------------

    def check_tick(self, now: float) -> None:
        for pool in self.pools.values():  # counted in check ticks, as the alert rule says
            pool.saturated_ticks = pool.saturated_ticks + 1 if pool.saturated else 0
        self.settling.settle_pending()
        self.pooling.report_status()
        self.ticks.start(now)

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
        self.timers = LoopTimers.make(
            config.supervisor, time.monotonic(), systemd.watchdog_interval()
        )
        arm_check_timer(config.supervisor.check_interval)
        self.pools = reloaded_pools(config.pools, self.pools)
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
        # A shutdown_timeout raised by HUP past the unit's TimeoutStopSec still drains.
        systemd.extend_timeout(grace + STOP_MARGIN)
        self.log.info(
            "master_stopping",
            signal=signame,
            graceful=graceful,
            shutdown_timeout=grace,
            children=len(self.children),
        )
        self.ticks.kill()  # a tick mid-chore is rolled back; the lease is released below
        for child in self.children:
            if graceful:
                self.children.retire(child, now, "shutdown", grace)
            else:
                self.children.kill(child)

    def finish_stop(self, now: float) -> bool:
        """True once every child is gone; past the deadline the rest are killed."""
        if not len(self.children) and self.ticks.running is None:
            return True
        if now >= self.stop_deadline:
            for child in self.children:
                if not child.sigkilled:
                    self.log.warning(
                        events.CHILD_KILLED_AT_SHUTDOWN,
                        child_pid=child.pid,
                        job_id=child.now_running,
                    )
                    self.children.kill(child)
        return False

    def shutdown(self) -> int:
        disarm_check_timer()
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        self.handbacks.write_pending()
        self.settling.settle_pending()
        self.db(lambda: self.store.remove_processes([self.name]))
        self.db(lambda: self.store.release_lock(CHORES_LOCK, self.name))
        self.store.close()
        left = {"unsettled": len(self.settling.unsettled), "unwritten": len(self.handbacks.unwritten)}
        self.log.info("master_stopped", **left)
        return int(ExitCode.OK)


def run_daemon(config: Config, config_path: str | None) -> int:
    """`forkq run`: import handlers before any fork (a broken module fails the boot), then arbitrate."""
    metrics.boot(config)  # before any fork: children inherit where their metrics go
    try:
        load_handlers(config)
        master = Master(config, config_path)
        try:
            return master.run()
        except SchemaError as exc:  # an operator's step, not a defect: one line, exit 78
            raise ConfigError(f"{exc} ({config.database.redacted()})") from exc
        except Exception:  # a defect of ours: say so in the log before the traceback
            master.log.error(events.MASTER_CRASHED, error=traceback.format_exc(limit=8))
            raise
    finally:
        metrics.shutdown()
