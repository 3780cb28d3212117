"""What keeps a handler from taking its worker with it: the soft timeout and a forked copy.

Both wrap every handler call (work/attempt.py). The soft timeout is the first of the two
stages of an overtime kill: SIGALRM raises JobTimeout inside the handler, before the
master's SIGTERM/SIGKILL. A handler that forks and returns in both processes must not
bring its copy back into the worker's loop.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from supervisor.errors import JobCancelled, JobTimeout


@contextmanager
def soft_timeout(seconds: float) -> Iterator[None]:
    """Raise JobTimeout inside the handler after `seconds` (SIGALRM; main thread only)."""
    arm_soft_timeout(seconds)
    try:
        yield
    finally:
        disarm_soft_timeout()


def arm_soft_timeout(seconds: float) -> None:
    """soft_timeout's first half, for the worker's per-job path (no generator per job).

    The alarm comes at the timeout or up to its slack later (1%, 0.25 s at most): a
    timer armed for one job serves each job started within the slack after it, so a run
    of quick jobs reads the timer (`getitimer`) instead of setting it and stopping it
    (two calls), and never gets an alarm inside a handler that is not past its timeout.
    The timer is read, not trusted: a handler may have stopped or moved it (a SIGALRM
    timeout decorator that puts our handler back). The handler is installed when
    SIGALRM's is not ours (once per process, or again after anything else took the
    signal, e.g. pytest-timeout). The raw handler is compared: `signal.getsignal` turns
    it into an enum by raising and catching a ValueError.
    """
    global _armed, cancel_raised, _deadline, _timer_at
    if _raw_getsignal(signal.SIGALRM) is not _expire:
        signal.signal(signal.SIGALRM, _expire)
    now = time.monotonic()
    _deadline = deadline = now + seconds
    _armed, cancel_raised = True, False
    latest = deadline + min(SLACK_MOST, seconds * SLACK_SHARE)
    if deadline < _timer_at <= latest:  # ours may serve: if it is still the one we set
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        if abs(left - (_timer_at - now)) < TIMER_TOLERANCE:
            return
    _timer_at = latest
    signal.setitimer(signal.ITIMER_REAL, latest - now)


def disarm_soft_timeout() -> None:
    global _armed, _timer_at
    signal.setitimer(signal.ITIMER_REAL, 0)
    _armed, _timer_at = False, 0.0


def end_soft_timeout() -> None:
    """The worker's per-job disarm: no system call. The timer is left to the next job
    (arm_soft_timeout) or to run out: an alarm outside a handler is ignored (`_expire`).
    The worker stops it for real before it waits for work, and here when the handler
    left another SIGALRM handler in place (its alarm must not land in the worker)."""
    global _armed
    _armed = False
    if _raw_getsignal(signal.SIGALRM) is not _expire:
        disarm_soft_timeout()


def interrupt_for_cancel() -> None:
    """From another thread (`forkq work`'s cancel watch): end the handler running now as
    the soft timeout does (a command's program tree killed), raising JobCancelled. Between
    handlers it does nothing: the alarm lands outside one and is ignored."""
    global _cancelled
    _cancelled = True
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)


def exit_if_forked(worker_pid: int) -> None:
    """End, at once, a copy of the worker that a handler forked and that came back here.

    A handler that forks and returns (or raises) in both processes brings its copy back
    into the worker: it would go on as a second, unsupervised worker under the same lease
    name, writing the job's outcome twice and talking on the parent's database socket.
    The copy writes nothing and flushes nothing (its buffers hold the parent's output
    too): `os._exit` with 0 after a return, the code of a SystemExit, else 1.
    """
    if os.getpid() == worker_pid:  # (a system call: a fork outside os.fork is caught too)
        return
    exc = sys.exc_info()[1]
    code = 0
    if isinstance(exc, SystemExit):
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    elif exc is not None:
        code = 1
    os._exit(code)


# The C module's getsignal: the handler as installed, no enum conversion.
_raw_getsignal: Callable[[int], Any] = importlib.import_module("_signal").getsignal


_armed = False  # a handler runs under the soft timeout: an alarm now is meant for it
_deadline = 0.0  # its timeout, in time.monotonic()
_timer_at = 0.0  # when the timer armed last fires (monotonic); 0.0: none armed, or fired
SLACK_SHARE = 0.01  # the soft timeout may come this share of the timeout late,
SLACK_MOST = 0.25  # and at most this many seconds (the master's kill waits KILL_GRACE: 3 s)
TIMER_TOLERANCE = 0.002  # seconds: the timer read back is the one we set
_cancelled = False  # the next alarm is interrupt_for_cancel's
# The running handler was sent JobCancelled (it may have caught it and gone on): its job
# must not end done (attempt.py), it was cancelled.
cancel_raised = False


def _expire(signum: int, frame: FrameType | None) -> None:
    global _cancelled, cancel_raised, _timer_at
    cancelled, _cancelled, _timer_at = _cancelled, False, 0.0  # (the next arm sets it anew)
    if not _armed:  # stray: a timer left by a job that ended, a cancel too late
        return
    if cancelled:
        cancel_raised = True
        raise JobCancelled()
    if (early := _deadline - time.monotonic()) > 0:  # never by design: the timer is the job's
        _timer_at = _deadline
        signal.setitimer(signal.ITIMER_REAL, early)
        return
    raise JobTimeout()
