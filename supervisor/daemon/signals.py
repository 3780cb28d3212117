"""The master's signals: handlers only queue them; the loop acts on them.

`signal.set_wakeup_fd` writes a byte to a pipe the loop's `select` watches, so a signal
wakes the loop at once without a handler doing any work. SIGALRM is the check tick's
timer (every check_interval).
"""

from __future__ import annotations

import os
import signal
from collections import deque
from types import FrameType

from supervisor.proc import MASTER_SIGNALS

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)


class SignalQueue:
    def __init__(self) -> None:
        self.pending: deque[int] = deque()
        self.wake_r, self.wake_w = os.pipe()

    def install(self, check_interval: float) -> None:
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        for sig in MASTER_SIGNALS:
            signal.signal(sig, self._queue)
        arm_check_timer(check_interval)

    def _queue(self, signum: int, frame: FrameType | None) -> None:
        self.pending.append(signum)  # nothing else here: the loop acts

    def fds(self) -> list[int]:
        return [self.wake_r, self.wake_w]

    def stop_pending(self) -> bool:
        return any(sig in STOP_SIGNALS for sig in self.pending)

    def drain_wakeups(self) -> None:
        """Empty the wakeup pipe (the signals themselves are in `pending`)."""
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass


def arm_check_timer(interval: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, interval, interval)


def disarm_check_timer() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
