"""The check-tick process seen from the master: fork it, read its report, see it exit.

The tick itself (what it does) is supervisor/cluster/tick.py.
"""

from __future__ import annotations

import os
import signal
import sys

from supervisor.cluster.tick import TickInput, TickReport, tick_main
from supervisor.config import Config
from supervisor.proc import MASTER_SIGNALS


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
        sys.stdout.flush()
        sys.stderr.flush()
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, MASTER_SIGNALS)
        pid = os.fork()
        if pid == 0:
            tick_main(config, given, report_w, [report_r, *close_fds])
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
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
