"""The metrics side of the master: its series, the pulse /healthz reads, and the
metrics server process it forks and brings back when it dies (metrics.py calls it)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import signal
import socket
import time
from collections.abc import Callable

from supervisor import events, logs
from supervisor.cluster.alerts.states import QUEUE_RULES
from supervisor.config import Config
from supervisor.errors import ConfigError
from supervisor.kinds import Role
from supervisor.observe.health import db_limit
from supervisor.observe.shared import Check, Pulse, pulse_path, write_check

DIR_PREFIX = "forkq-metrics-"
# A bind that fails so at boot never works: no address of this host, a port below 1024, a
# name that does not resolve (EAI_NONAME; a resolver that did not answer is tried again).
NEVER_BINDS = (errno.EADDRNOTAVAIL, errno.EACCES, socket.EAI_NONAME)
RESPAWN_MAX = 30.0  # seconds between tries to bring a failed metrics server back, at most


def stale_after(config: Config) -> float:
    from supervisor.cluster.tick import tick_timeout

    interval = config.supervisor.check_interval
    return tick_timeout(interval) + interval  # a tick may run this long, then one more


def sweep_stale(parent: str, prefix: str = DIR_PREFIX) -> None:
    """Directories `prefix`PID-... a master (or supervisor) killed -9 left behind: ours
    (uid), that process gone, and none of the processes whose series files are in it
    (prometheus-client's `KIND_PID.db`; a worker makes its own at its start): orphaned
    children finish their jobs and record them there (one that found its directory gone
    died after its handler ran, before its success was written)."""
    stale = re.compile(re.escape(prefix) + r"(\d+)-")
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            match = stale.match(entry.name)
            if not match or not entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == os.getuid() and not any(
                    map(_alive, [int(match[1]), *_writers(entry.path)])
                ):
                    shutil.rmtree(entry.path, ignore_errors=True)


_WRITER = re.compile(r"_(\d+)\.db$")


def _writers(directory: str) -> list[int]:
    """The pids whose series files are in a metrics directory."""
    with os.scandir(directory) as entries:
        return [int(m[1]) for e in entries if (m := _WRITER.search(e.name))]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class QueueAlerts:
    """The queue rules' alert figures as last judged. While the database is down no tick
    judges them (their figures are unknown), and /metrics shows them as they were rather
    than drop the series: a `forkq_alerts_firing == 1` rule would read a gap as resolved."""

    def __init__(self) -> None:
        self.last: list[tuple[str, str, bool]] = []

    def kept(self, alerts: list[tuple[str, str, bool]], down: bool) -> list[tuple[str, str, bool]]:
        if not down:
            self.last = [a for a in alerts if a[0] in QUEUE_RULES]
            return alerts
        return alerts + [a for a in self.last if a not in alerts]


class MasterSide:
    """The master's series, its pulse, and the server process it keeps running."""

    def __init__(
        self,
        directory: str,
        config: Config,
        close_fds: Callable[[], list[int]],
        database: str | None = None,
        several: bool = False,
    ) -> None:
        from supervisor.observe.series import MasterSeries

        self.directory = directory
        self.close_fds = close_fds  # what the server closes after its fork
        self.series: MasterSeries = MasterSeries(database)
        # A master of several databases: its pulse in a file the supervisor's server
        # maps; the supervisor (`several`): its server reads every master's.
        self.database = database
        self.several = several
        self.pulse = Pulse(None if database is None else pulse_path(directory, database))
        self.listen = None if database is not None else config.metrics.listen
        self.stale_after = stale_after(config)
        self.db_limit = db_limit(config.supervisor.check_interval)
        self.server_pid: int | None = None
        self.stopped: set[int] = set()  # servers killed on purpose, not yet reaped
        self.server_started = 0.0
        self.failures = 0
        self.next_start = 0.0
        self.log = logs.get(role=Role.MASTER, component="metrics")
        self.queue_alerts = QueueAlerts()

    @staticmethod
    def now_times() -> tuple[float, float]:
        return time.monotonic(), time.time()

    def write_check(self, check: Check) -> None:
        try:
            write_check(self.directory, check, self.database)
        except OSError as exc:  # a full disk: /healthz goes stale, jobs go on
            self.log.warning(events.METRICS_CHECK_NOT_WRITTEN, error=str(exc))

    def start_server(self, now: float, boot: bool = False) -> None:
        """Bind and fork the server; a bind that failed is tried again later (a port still
        taken), unless at `boot` it can never work: a name that does not resolve, an
        address not this host's, a port it may not bind (a config error, exit 78)."""
        from supervisor.observe.server import bind, spawn

        assert self.listen is not None
        try:
            sock = bind(self.listen)
        except OSError as exc:
            if boot and exc.errno in NEVER_BINDS:
                raise ConfigError(f"[metrics] listen = {self.listen!r}: {exc}") from exc
            self.failed(now)
            self.log.error(
                events.METRICS_LISTEN_FAILED,
                listen=self.listen,
                error=str(exc),
                retry_in=round(self.next_start - now, 1),
            )
            return
        port = int(sock.getsockname()[1])
        try:
            pulse = None if self.several else self.pulse
            self.server_pid = spawn(sock, self.directory, pulse, self.close_fds())
        except OSError as exc:  # fork failed (EAGAIN, ENOMEM)
            self.failed(now)
            self.log.error(events.METRICS_SERVER_NOT_STARTED, error=str(exc))
            return
        finally:
            sock.close()  # the server has it; no child of ours may hold the port
        self.server_started = now
        self.log.info(
            events.METRICS_SERVING,
            listen=self.listen,
            port=port,
            server_pid=self.server_pid,
            directory=self.directory,
        )

    def failed(self, now: float) -> None:
        self.failures += 1
        self.next_start = now + min(RESPAWN_MAX, 0.5 * 2**self.failures)

    def server_exited(self, pid: int, status: int) -> bool:
        if pid in self.stopped:
            self.stopped.discard(pid)
            return True
        if pid != self.server_pid:
            return False
        from supervisor.proc import describe_exit

        self.server_pid = None
        now = time.monotonic()
        if now - self.server_started > 60.0:
            self.failures = 0
        self.failed(now)
        self.log.error(
            events.METRICS_SERVER_EXITED,
            status=describe_exit(status),
            retry_in=round(self.next_start - now, 1),
        )
        return True

    def stop_server(self, wait: bool = False) -> None:
        pid, self.server_pid = self.server_pid, None
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not wait:
            self.stopped.add(pid)
            return
        deadline = time.monotonic() + 2.0  # SIGKILL: gone at once unless in the kernel
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(pid, os.WNOHANG) == (0, 0) and time.monotonic() < deadline:
                time.sleep(0.01)
