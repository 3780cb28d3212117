"""The arbiter: boot, the loop, signal dispatch, reload and stop.

No threads. Signal handlers only queue the signal; `signal.set_wakeup_fd` wakes the
loop's `select`, which also watches every child's status pipe, the check tick's report
and the wake socket. It decides nothing by itself: decisions.py says what and when,
children.py forks, reaps and kills, handback.py takes back what a busy child holds,
booting.py waits for the database at boot, dbguard.py keeps database calls from blocking
a stop or a kill, and the check tick (ticks.py, cluster/tick.py) does the slow cluster
work in a process of its own. While stopping, HUP, TTIN and TTOU are said and ignored.
"""

from __future__ import annotations

import os
import select
import signal
import time
import traceback

from supervisor import events, logs, masking, wake
from supervisor.cluster.chores import CHORES_LOCK
from supervisor.config import Config
from supervisor.daemon import member, systemd
from supervisor.daemon.booting import checked_store, wait_for_database
from supervisor.daemon.children import Children
from supervisor.daemon.dbguard import DbGuard
from supervisor.daemon.handback import HandBacks
from supervisor.daemon.pooling import Pooling
from supervisor.daemon.settling import Settling
from supervisor.daemon.shared import Shared
from supervisor.daemon.signals import SignalQueue, arm_check_timer, disarm_check_timer
from supervisor.daemon.state import Phase, PoolState, reloaded_pools
from supervisor.daemon.ticks import CheckTicks
from supervisor.daemon.timers import LoopTimers
from supervisor.errors import ConfigError, DatabaseRefused, ExitCode, SchemaError
from supervisor.kinds import RetireReason, Role
from supervisor.observe import metrics
from supervisor.proc import freeze_heap, hostname, node_id, process_name, set_title
from supervisor.store import Store, open_store
from supervisor.work.command import load_handlers
from supervisor.work.descendants import become_subreaper

MAX_SLEEP = 1.0  # the loop wakes at least this often (watchdog, deadlines)
# The master's own queries give up after this: a stop or an overtime kill waits at most
# this long on a silent database (SPEC: within 1 s). They are index dives and keyed writes.
DB_TIMEOUT = 0.75
STOP_MARGIN = 5.0  # seconds past shutdown_timeout the stop may take (settling, kills, close)


class Master:
    def __init__(self, config: Config, config_path: str | None) -> None:
        self.config_path = config_path
        host, name, log = hostname(), process_name(), logs.get(role=Role.MASTER)
        self.children = Children(log, host, name)
        self.signals = SignalQueue()
        self.stop_deadline = 0.0
        kills = self.children
        guard = DbGuard(log, DB_TIMEOUT, kills.kill_overtime, self.stop_requested, kills.next_kill)
        guard.reachable_again = kills.wake_all  # a child in a back-off writes and claims now
        pools = {p.name: PoolState(p) for p in config.pools}
        # What the parts below share; reload() and the tick's report update it in place.
        self.state = Shared(
            config, open_store_for(config), log, guard, host, name, node_id(), pools
        )
        self.listener: wake.WakeListener | None = None  # same-host nudges (wake.py)
        # The check tick: on SIGALRM every check_interval, the first one interval after boot.
        self.check_due = False
        self.ticks = CheckTicks(self.state, self.fds_for_fork, self.stop_requested)
        self.pooling = Pooling(self.state, self.children, self.master_fds)
        self.settling = settling = Settling(self.state, self.children)
        state = self.state
        write = lambda o, taken: state.db(lambda: settling.store_named(o).hand_back(o, taken))  # noqa: E731
        self.handbacks = HandBacks(self.children, write, lambda: guard.error is None, log)
        watchdog = systemd.watchdog_interval()
        self.timers = LoopTimers.make(config.supervisor, time.monotonic(), watchdog)

    # --- signals -------------------------------------------------------------------------

    def stop_requested(self) -> bool:
        return self.state.stopping or self.signals.stop_pending()

    def handle_signals(self) -> None:
        while self.signals.pending:
            sig = self.signals.pending.popleft()
            if sig in (signal.SIGTERM, signal.SIGINT):
                self.begin_stop(graceful=True, signame=signal.Signals(sig).name)
            elif sig == signal.SIGQUIT:
                self.begin_stop(graceful=False, signame="SIGQUIT")
            elif self.state.stopping and sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):
                self.state.log.info(events.ALREADY_STOPPING, signal=signal.Signals(sig).name)
            elif sig == signal.SIGHUP:
                self.reload()
            elif sig in (signal.SIGTTIN, signal.SIGTTOU):
                self.pooling.resize_all(+1 if sig == signal.SIGTTIN else -1)
            elif sig == signal.SIGALRM:
                self.check_due = True  # the check tick starts on this loop turn

    # --- boot ----------------------------------------------------------------------------

    def boot(self) -> bool:
        """False when a stop signal arrived while the database was waited for."""
        self.signals.install(self.state.config.supervisor.check_interval)  # a stop ends the wait
        if wait_for_database(self.state.log, self.signals, self.boot_db) is None:
            return False
        become_subreaper()  # what a hard-killed child's job leaves comes to us (kill_strays)
        self.listener = wake.listen(self.state.config.database, self.state.log)
        set_title(member.master_title())
        freeze_heap()  # before the first fork: what the boot made lives as long as the master
        metrics.start(self.state.config, self.fds_for_fork)
        self.state.log.info(
            events.MASTER_STARTED,
            name=self.state.name,
            pools={p: s.config.workers for p, s in self.state.pools.items()},
            **member.where(self.state.config.database.redacted()),
            pid=os.getpid(),
        )
        self.pooling.maintain(time.monotonic())
        systemd.ready()
        self.pooling.report_status()
        return True

    def boot_db(self) -> int:
        """The boot's database calls, tried again as a whole while the database is not ready."""
        version = self.state.store.require_latest_schema()
        self.state.clock_offset = self.state.store.db_now() - time.time()
        self.state.started_at = time.time() + self.state.clock_offset
        self.state.store.register_process(
            self.state.name, self.state.host, os.getpid(), Role.MASTER, node=self.state.node
        )
        self.settling.settle_dead_local_processes()
        return version

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        if not self.boot():
            return self.shutdown()
        while True:
            self.wait_for_events()
            metrics.loop_turned(
                self.state.guard.answered_at, self.state.guard.error is not None
            )  # /healthz
            self.handle_signals()
            now = time.monotonic()
            self.reap(now)
            self.handbacks.run(now)  # a drain hands back too: those jobs go to other hosts
            if self.state.stopping:
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
            if not self.state.stopping:
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
        if self.state.stopping:  # no timers run while stopping but cancels, hand-backs and kills
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
                {n: p.maximum for n, p in self.state.pools.items()},
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
        for pool in self.state.pools.values():  # counted in check ticks, as the alert rule says
            pool.saturated_ticks = pool.saturated_ticks + 1 if pool.saturated else 0
        self.settling.settle_pending()
        self.pooling.report_status()
        self.ticks.start(now)

    # --- reload and stop -----------------------------------------------------------------

    def reload(self) -> None:
        """HUP: re-read config and handlers; replace every child gracefully."""
        systemd.reloading()
        try:
            config = member.reloaded_config(self.config_path, self.state.config, self.state.log)
            store = checked_store(config, self.state.config, open_store_for)
        except ConfigError as exc:
            # A module's import error may quote a secret: masked as a job's error is
            self.state.log.error(events.RELOAD_REFUSED, error=masking.masked(str(exc)))
            systemd.ready()
            return
        masking.remember(config)  # the old values stay masked too
        if store is not None:  # another database, with forkq's latest schema
            self.settling.moved_off(self.state.store)  # the children forked for it end there
            self.state.store = store
            if self.listener is not None:
                self.listener.close()
            self.listener = wake.listen(config.database, self.state.log)
        self.state.config = config
        metrics.reload(config)
        # New intervals take effect now; the next tick takes the new chores lease.
        watchdog = systemd.watchdog_interval()
        self.timers = LoopTimers.make(config.supervisor, time.monotonic(), watchdog)
        arm_check_timer(config.supervisor.check_interval)
        self.state.pools = reloaded_pools(config.pools, self.state.pools)
        now, grace = time.monotonic(), config.supervisor.shutdown_timeout
        for child in self.children:
            self.children.retire(child, now, RetireReason.RELOAD, grace)
        self.state.log.info(
            events.CONFIG_RELOADED, pools={p: s.target for p, s in self.state.pools.items()}
        )
        systemd.ready()

    def begin_stop(self, graceful: bool, signame: str) -> None:
        if self.state.stopping and graceful:
            self.state.log.info(events.ALREADY_STOPPING, signal=signame)
            return
        self.state.stopping = True
        systemd.stopping()
        now = time.monotonic()
        grace = self.state.config.supervisor.shutdown_timeout
        self.stop_deadline = now + (grace if graceful else 0.0)
        # A shutdown_timeout raised by HUP past the unit's TimeoutStopSec still drains.
        systemd.extend_timeout(grace + STOP_MARGIN)
        self.state.log.info(
            events.MASTER_STOPPING, signal=signame, graceful=graceful, shutdown_timeout=grace,
            children=len(self.children),
        )  # fmt: skip
        self.ticks.kill()  # a tick mid-chore is rolled back; the lease is released below
        for child in self.children:
            if graceful:
                self.children.retire(child, now, RetireReason.SHUTDOWN, grace)
            else:
                self.children.kill(child)

    def finish_stop(self, now: float) -> bool:
        """True once every child is gone; past the deadline the rest are killed."""
        if not len(self.children) and self.ticks.running is None:
            return True
        if now >= self.stop_deadline:
            for child in self.children:
                if not child.sigkilled:
                    self.state.log.warning(
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
        self.settling.finish()
        # What finished since the last heartbeat (the drain's jobs among them): a restart
        # or a deploy loses no figure of the chart or the handlers page.
        self.pooling.write_throughput()
        self.state.db(lambda: self.state.store.remove_processes([self.state.name]))
        self.state.db(lambda: self.state.store.release_lock(CHORES_LOCK, self.state.name))
        self.state.store.close()
        unsettled, unwritten = len(self.settling.unsettled), len(self.handbacks.unwritten)
        self.state.log.info(events.MASTER_STOPPED, unsettled=unsettled, unwritten=unwritten)
        return int(ExitCode.OK)


def open_store_for(config: Config) -> Store:
    session = config.supervisor.db_session_timeout
    return open_store(config.database, timeout=DB_TIMEOUT, session_timeout=session)


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
        except DatabaseRefused as exc:  # a password, a grant, a database name: one line
            master.state.log.error(events.MASTER_REFUSED, error=str(exc))
            raise
        except Exception as exc:  # a defect of ours: say so in the log before the traceback
            if not isinstance(exc, ConfigError):  # (one the boot found: one line, exit 78)
                master.state.log.error(events.MASTER_CRASHED, error=traceback.format_exc(limit=8))
            raise
    finally:
        metrics.shutdown()
