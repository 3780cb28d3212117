"""The check-tick process seen from the master: fork it, read its report, see it exit.

The tick itself (what it does) is supervisor/cluster/tick.py. One runs at a time; one
that outlives tick_timeout is killed. Its report carries what the master keeps between
ticks: the alert states, the database clock's offset and the paused queues.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from functools import partial

from supervisor import events
from supervisor.cluster.tick import TickInput, TickReport, tick_crashed, tick_main, tick_timeout
from supervisor.config import Config
from supervisor.daemon.shared import Shared
from supervisor.daemon.unserved import UnservedQueues, from_report
from supervisor.observe import metrics
from supervisor.proc import describe_exit, fork_process, kill_group


class TickProcess:
    """The running check tick: its pid and the pipe its report comes on."""

    def __init__(self, pid: int, report_r: int, started: float) -> None:
        self.pid = pid
        self.report_r = report_r
        self.started = started
        self.buffer = b""
        self.report: TickReport | None = None
        self.unreadable: str | None = None  # why a report could not be decoded

    @classmethod
    def fork(
        cls, config: Config, given: TickInput, now: float, close_fds: list[int]
    ) -> TickProcess:
        report_r, report_w = os.pipe()
        body = partial(tick_main, config, given, report_w)
        pid = fork_process(body, [report_r, *close_fds], tick_crashed)
        os.close(report_w)
        os.set_blocking(report_r, False)
        return cls(pid, report_r, now)

    def read(self) -> bool:
        """Read what the pipe has; True once the whole report is in (EOF)."""
        if self.report_r < 0:
            return True
        try:
            data = os.read(self.report_r, 65536)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        self.buffer += data
        if data:
            return False
        os.close(self.report_r)
        self.report_r = -1
        if self.buffer:
            try:
                self.report = TickReport.decode(self.buffer)
            except (ValueError, TypeError, KeyError) as exc:
                self.unreadable = str(exc)[:200]
        return True

    def drain(self) -> None:
        """After the process exited: read to EOF."""
        while not self.read():
            pass


class CheckTicks:
    """The master's side of its check ticks (started on SIGALRM)."""

    def __init__(
        self, state: Shared, fds: Callable[[], list[int]], stop_requested: Callable[[], bool]
    ) -> None:
        self.state = state  # the tick's report sets its clock offset and paused queues
        self.fds_for_fork = fds  # what the tick closes first
        self.stop_requested = stop_requested
        self.running: TickProcess | None = None
        self.alert_memory: dict[str, object] = {}  # host alert states, carried across ticks
        self.leader: bool | None = None  # the last tick's; None before the first
        self.sweep_from: int | None = None  # the chores' sweep of dependencies, carried on
        self.unserved = UnservedQueues()  # queues with ready jobs no pool of ours serves

    @property
    def pid(self) -> int | None:
        return self.running.pid if self.running is not None else None

    def fds(self) -> list[int]:
        """The running tick's report pipe, if it is still open."""
        tick = self.running
        return [tick.report_r] if tick is not None and tick.report_r >= 0 else []

    def start(self, now: float) -> None:
        """Fork a tick, unless one runs (a hung one is killed) or a stop was asked for."""
        s = self.state
        if self.running is not None:
            if now - self.running.started > tick_timeout(s.config.supervisor.check_interval):
                s.log.warning(events.CHECK_TICK_KILLED, tick_pid=self.running.pid)
                kill_group(self.running.pid, signal.SIGKILL)
            return
        if self.stop_requested():  # no chores nor alerts while stopping
            return
        given = TickInput(
            host=s.host,
            owner=s.name,
            started_at=s.started_at,
            clock_offset=s.clock_offset,
            saturated_ticks={name: p.saturated_ticks for name, p in s.pools.items()},
            crash_looping={name for name, p in s.pools.items() if p.crash_looping},
            alert_memory=dict(self.alert_memory),
            sweep_from=self.sweep_from,
        )
        self.running = TickProcess.fork(s.config, given, now, self.fds_for_fork())

    def readable(self) -> None:
        """Its report pipe is readable: read it, and take the report once it is whole."""
        if self.running is not None and self.running.read():
            self.take_report(self.running)

    def take_report(self, tick: TickProcess) -> None:
        s = self.state
        if tick.unreadable:
            s.log.error(events.CHECK_TICK_REPORT_UNREADABLE, error=tick.unreadable)
        report = tick.report
        if report is None:
            return
        metrics.tick_report(report)
        self.alert_memory = report.alert_memory
        self.sweep_from = report.sweep_from
        s.clock_offset = report.clock_offset
        if report.paused is not None:
            s.paused = set(report.paused)
        if report.queues is not None:  # the chores holder's figures: queues unserved here
            self.unserved.seen(s.config, from_report(report.queues), s.log)

    def exited(self, status: int) -> None:
        tick, self.running = self.running, None
        if tick is None:
            return
        if tick.report_r >= 0:
            tick.drain()
            self.take_report(tick)
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            self.state.log.warning(events.CHECK_TICK_FAILED, status=describe_exit(status))
            return
        leader = bool(tick.report and tick.report.leader)
        took = round(time.monotonic() - tick.started, 3)
        # The tick's pulse: news at info only when the chores leadership changed (the
        # first tick says who leads); every other one at debug, or it is all that scrolls.
        changed, self.leader = leader != self.leader, leader
        say = self.state.log.info if changed else self.state.log.debug
        say(events.CHECK_TICK, seconds=took, leader=leader)

    def kill(self) -> None:
        """At stop: a tick mid-chore is rolled back; the master releases the lease."""
        if self.running is not None:
            kill_group(self.running.pid, signal.SIGKILL)
