"""Several databases: `forkq run` as a small supervisor with a master per database.

With `[databases.NAME]` in the config the process `forkq run` starts forks one Master
(master.py, unchanged) per database, each with that database's own config
(Config.for_database): its pools, schedules and limits, its process rows, heartbeats,
chores lease, alerts and same-host wake socket. A database that does not answer holds
up only its own master: the others claim, kill overtime jobs, take signals and stop on
their own. The supervisor only forwards signals, brings back a master that died (with
a growing back-off), serves the host's one metrics port (observe/several.py) and alone
talks to systemd (NotifyAccess=main).

Each master's sd_notify messages come to a socket of the supervisor's own (its
NOTIFY_SOCKET): READY=1 once every master booted or said it waits for its database
(so one database down does not fail the unit's start), WATCHDOG=1 while its own loop
turns; a booted master that stops pinging is killed and started again, alone. HUP re-reads the config here first: a bad one is refused and nothing
is forwarded; databases added are started, removed ones stopped, the rest reloaded.
Without `[databases]` none of this runs: `forkq run` is the master itself.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable

from supervisor import events, logs, registry
from supervisor.config import Config
from supervisor.daemon import member, systemd
from supervisor.daemon.member import CREDENTIALS, Member, respawn_delay, sender
from supervisor.daemon.signals import SignalQueue, disarm_check_timer
from supervisor.errors import ConfigError, DatabaseRefused, ExitCode
from supervisor.kinds import Role
from supervisor.observe import metrics
from supervisor.observe.master_side import sweep_stale
from supervisor.proc import describe_exit, die_with_parent, fork_process, set_title
from supervisor.work.command import load_handlers

RunMaster = Callable[[Config, str | None], int]
TURN = 0.25  # seconds between looks at exited masters and due respawns, at most
HEALTHY_RUN = 60.0  # a master that ran this long starts again at once when it dies
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGTTIN, signal.SIGTTOU)
NOTIFY_PREFIX = "forkq-notify-"  # the masters' notify sockets: /tmp/forkq-notify-PID-...
WAITING = "STATUS=waiting for the database"  # booting.py's status while it waits


class Federation:
    def __init__(self, config: Config, config_path: str | None, run_master: RunMaster) -> None:
        self.config, self.config_path = config, config_path
        self.run_master = run_master  # master.run_daemon: only the command line imports it
        self.log = logs.get(role=Role.MASTER, component="supervisor")
        self.signals = SignalQueue()
        sweep_stale(tempfile.gettempdir(), NOTIFY_PREFIX)  # a supervisor killed -9 left it
        self.sockets = tempfile.mkdtemp(prefix=f"{NOTIFY_PREFIX}{os.getpid()}-")  # mode 0700
        self.members: dict[str, Member] = {}
        self.stopping = False
        self.code = int(ExitCode.OK)
        self.ready_sent = False
        self.status_due = False
        self.watchdog = systemd.watchdog_interval()  # seconds between pings; None: none
        self.pinged = 0.0

    # --- the loop ------------------------------------------------------------------------

    def run(self) -> int:
        self.signals.install(self.config.supervisor.check_interval)
        disarm_check_timer()  # no check tick here: each master has its own
        set_title("forkq: supervisor")
        metrics.several(self.config, self.names(self.config))
        metrics.start(self.config, self.fds)
        self.log.info(
            events.SUPERVISOR_STARTED,
            databases={n: u.redacted() for n, u in self.config.every_database()},
            pid=os.getpid(),
        )
        now = time.monotonic()
        for name in self.names(self.config):
            self.members[name] = self.new_member(name)
            self.spawn(self.members[name], now)
        try:
            while self.members:
                self.turn()
        finally:
            for each in self.members.values():
                each.notify.close()
            shutil.rmtree(self.sockets, ignore_errors=True)
        self.log.info(events.SUPERVISOR_STOPPED, exit_code=self.code)
        return self.code

    def turn(self) -> None:
        fds = [self.signals.wake_r, *(m.notify.fileno() for m in self.members.values())]
        try:
            readable, _, _ = select.select(fds, [], [], TURN)
        except InterruptedError:
            readable = []
        for each in list(self.members.values()):
            if each.notify.fileno() in readable:
                self.read_notify(each)
        if self.signals.wake_r in readable:
            self.signals.drain_wakeups()
        metrics.loop_turned()  # the server's respawn, when it died
        self.handle_signals()
        now = time.monotonic()
        self.reap(now)
        if not self.stopping:
            for each in self.members.values():
                if each.pid is None and not each.leaving and now >= each.next_start:
                    self.spawn(each, now)
        self.notify_systemd(now)

    @staticmethod
    def names(config: Config) -> list[str]:
        return [name for name, _ in config.every_database()]

    def fds(self) -> list[int]:
        """What a process forked here closes first."""
        return [*self.signals.fds(), *(m.notify.fileno() for m in self.members.values())]

    # --- masters -------------------------------------------------------------------------

    def new_member(self, name: str) -> Member:
        path = os.path.join(self.sockets, name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        sock.bind(path)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # who sent each message
        sock.setblocking(False)
        return Member(name, sock)

    def spawn(self, each: Member, now: float) -> None:
        config = self.config.for_database(each.name, registry.queue_of)
        notify_path = os.path.join(self.sockets, each.name)
        path, supervisor_pid = self.config_path, os.getpid()

        def body() -> int:  # in the master
            die_with_parent(signal.SIGTERM)  # a supervisor killed -9: its masters stop
            if os.getppid() != supervisor_pid:  # it died before the line above took hold
                return int(ExitCode.OK)
            for sig in (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU):  # until the master's
                signal.signal(sig, signal.SIG_IGN)  # own handlers: it reads the newest config
            os.environ["NOTIFY_SOCKET"] = notify_path
            os.environ["WATCHDOG_PID"] = str(os.getpid())
            member.become(each.name)
            try:
                return self.run_master(config, path)
            except ConfigError as exc:  # an older schema in this database: one line, 78
                logs.get(role=Role.MASTER).error(events.MASTER_REFUSED, error=str(exc))
                return int(ExitCode.CONFIG)
            except DatabaseRefused:  # run_daemon said why in one line: no traceback
                return int(ExitCode.FAILURE)

        try:
            each.pid = fork_process(body, self.fds(), self.crashed)
        except OSError as exc:  # EAGAIN, ENOMEM: tried again after the back-off
            self.log.error(events.MASTER_NOT_STARTED, database=each.name, error=str(exc))
            self.died(each, now)
            return
        each.started, each.booted, each.pinged = now, False, now
        self.log.info(events.MASTER_FORKED, database=each.name, master_pid=each.pid)

    def crashed(self, error: str) -> None:
        self.log.error(events.MASTER_CRASHED, error=error)

    def died(self, each: Member, now: float) -> None:
        each.pid, each.booted, each.waiting, each.reload_due, each.killed = (None, *[False] * 4)
        each.resizes.clear()
        each.failures = 1 if now - each.started > HEALTHY_RUN else each.failures + 1
        each.next_start = now + respawn_delay(each.failures)

    def reap(self, now: float) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            each = next((m for m in self.members.values() if m.pid == pid), None)
            if each is None:
                metrics.reaped(pid, status)  # the metrics server
                continue
            metrics.master_exited(pid)  # a respawn or none: its pools' gauges are not live
            code = os.waitstatus_to_exitcode(status)
            said = {"database": each.name, "status": describe_exit(status)}
            if each.leaving and not self.stopping and each.name in self.names(self.config):
                each.leaving, each.failures = False, 0  # removed, then added back: start it
                self.died(each, now)
                self.log.info(events.MASTER_EXITED, **said)
                continue
            if self.stopping or each.leaving:
                # A refusal (78) meeting the stop was said as master_refused, and had it
                # come a moment earlier the member would have been waiting, not counted.
                if code > 0 and code != ExitCode.CONFIG:
                    self.code = max(self.code, code)
                self.log.info(events.MASTER_EXITED, **said)
                del self.members[each.name]
                each.notify.close()
                continue
            self.died(each, now)
            restart_in = round(each.next_start - now, 1)
            self.log.error(events.MASTER_EXITED, **said, restart_in=restart_in)

    def send(self, sig: int, names: list[str] | None = None) -> None:
        for each in self.members.values():
            if each.pid is not None and (names is None or each.name in names):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(each.pid, sig)

    def resize(self, sig: int) -> None:
        """TTIN/TTOU: a master still booting ignores them until its own handlers are in,
        so it gets them once it says it booted (or waits for its database)."""
        for each in self.members.values():
            if each.pid is not None and not each.booted:
                each.resizes.append(sig)
        self.send(sig, [m.name for m in self.members.values() if m.booted])

    # --- signals -------------------------------------------------------------------------

    def handle_signals(self) -> None:
        while self.signals.pending:
            sig = self.signals.pending.popleft()
            if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                if not self.stopping:
                    self.log.info(events.SUPERVISOR_STOPPING, signal=signal.Signals(sig).name)
                    systemd.stopping()
                self.stopping = True
                for each in [m for m in self.members.values() if m.pid is None]:
                    del self.members[each.name]  # waiting to be started again: it is not
                    each.notify.close()
            if sig in (signal.SIGTTIN, signal.SIGTTOU):
                self.resize(sig)
            elif sig in FORWARDED:
                self.send(sig)
            elif sig == signal.SIGHUP and not self.stopping:
                self.reload()

    def reload(self) -> None:
        systemd.reloading()
        try:
            config = member.checked_config(self.config_path, self.config, self.log)
        except ConfigError as exc:  # the masters keep the config they have
            self.log.error(events.RELOAD_REFUSED, error=str(exc))
            systemd.ready()
            return
        old, new = set(self.members), set(self.names(config))
        self.config = config
        metrics.reload(config)  # a moved [metrics] listen moves the server
        metrics.several(config, self.names(config))
        for name in old - new:
            self.members[name].leaving = True
            if self.members[name].pid is None:  # waiting to be started again: never now
                self.members.pop(name).notify.close()
            self.send(signal.SIGTERM, [name])
        # A master still draining after its database was removed is started again once
        # it exited (reap); it is not reloaded meanwhile.
        kept = [self.members[n] for n in sorted(old & new) if not self.members[n].leaving]
        for each in kept:  # one still booting ignores HUP: it reloads once it said so
            each.reload_due = each.pid is not None and not each.booted
        self.send(signal.SIGHUP, [m.name for m in kept if not m.reload_due])
        now = time.monotonic()
        for name in sorted(new - old):
            self.members[name] = self.new_member(name)
            self.spawn(self.members[name], now)
        self.log.info(
            events.CONFIG_RELOADED, databases=sorted(new), started=sorted(new - old),
            stopped=sorted(old - new),
        )  # fmt: skip
        self.ready_sent = False  # READY again once the new ones booted

    # --- systemd -------------------------------------------------------------------------

    def read_notify(self, each: Member) -> None:
        while True:
            try:
                data, ancillary, _, _ = each.notify.recvmsg(4096, CREDENTIALS)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if sender(ancillary) != each.pid:  # NotifyAccess=main: its workers' are ignored
                continue
            for line in data.decode("utf-8", "replace").splitlines():
                if each.reload_due and (line == "READY=1" or line.startswith(WAITING)):
                    each.reload_due = False  # its own handlers are in now
                    self.send(signal.SIGHUP, [each.name])
                if each.resizes and (line == "READY=1" or line.startswith(WAITING)):
                    for sig in each.resizes:  # TTIN/TTOU that came while it booted
                        self.send(sig, [each.name])
                    each.resizes.clear()
                if line == "READY=1":
                    each.booted, each.waiting, each.pinged = True, False, time.monotonic()
                elif line.startswith(WAITING) and not each.booted:
                    each.booted = each.waiting = True
                if line.startswith("STATUS="):
                    each.status = line.removeprefix("STATUS=")
                    self.status_due = True
                elif line == "WATCHDOG=1":
                    each.pinged = time.monotonic()
                elif line.startswith("EXTEND_TIMEOUT_USEC="):
                    systemd.notify(line)  # a master's stop that may take longer

    def notify_systemd(self, now: float) -> None:
        live = [m for m in self.members.values() if not m.leaving]
        # A master refused (an older schema) and tried again later holds no one back.
        settled = all(m.booted or m.failures for m in live)
        if not self.ready_sent and not self.stopping and live and settled:
            self.ready_sent = True
            systemd.ready()
        if self.status_due:
            self.status_due = False
            systemd.status("; ".join(f"{m.name}: {m.status}" for m in live))
        if self.watchdog is None or now - self.pinged < self.watchdog:
            return
        limit = 2 * self.watchdog  # WatchdogSec: a master pings every half of it
        # A master that waits for its database has no loop yet; it must not get the whole
        # unit restarted (the other databases with it): its STATUS says it waits.
        pinging = [
            m for m in live if m.booted and not m.waiting and m.pid is not None and not m.killed
        ]
        for each in pinging:
            if now - each.pinged >= limit:
                self.kill_unresponsive(each, now)
        # Every master that stopped pinging is killed and started again by this loop,
        # so while it turns the unit is alive: systemd restarts it only if this loop stops.
        self.pinged = now
        systemd.watchdog()

    def kill_unresponsive(self, each: Member, now: float) -> None:
        """A master whose loop stopped (no WATCHDOG=1 for WatchdogSec) is what systemd's
        watchdog is for; here it costs that database's master alone, not every one's:
        SIGKILL (its workers follow on their parent-death signal, as at a unit restart),
        then the reap starts it again."""
        self.log.error(
            events.MASTER_UNRESPONSIVE,
            database=each.name,
            master_pid=each.pid,
            silent_for=round(now - each.pinged, 1),
        )
        each.killed = True
        if each.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each.pid, signal.SIGKILL)


def run_federation(config: Config, config_path: str | None, run_master: RunMaster) -> int:
    """`forkq run` with `[databases]`: handlers imported before any fork, then supervise."""
    metrics.boot(config)  # before any fork: every master records in one directory
    try:
        load_handlers(config)
        return Federation(config, config_path, run_master).run()
    finally:
        metrics.shutdown()
