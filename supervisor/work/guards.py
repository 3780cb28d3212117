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

    The handler is installed when SIGALRM's is not ours (once per process, or again after
    anything else took the signal, e.g. pytest-timeout); each job then only arms and
    disarms the timer. The raw handler is compared: `signal.getsignal` turns it into an
    enum by raising and catching a ValueError, a few microseconds every job.
    """
    global _armed, cancel_raised
    if _raw_getsignal(signal.SIGALRM) is not _expire:
        signal.signal(signal.SIGALRM, _expire)
    _armed, cancel_raised = True, False
    signal.setitimer(signal.ITIMER_REAL, seconds)


def disarm_soft_timeout() -> None:
    global _armed
    signal.setitimer(signal.ITIMER_REAL, 0)
    _armed = False


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
    if os.getpid() == worker_pid:
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
_cancelled = False  # the next alarm is interrupt_for_cancel's
# The running handler was sent JobCancelled (it may have caught it and gone on): its job
# must not end done (attempt.py), it was cancelled.
cancel_raised = False


def _expire(signum: int, frame: FrameType | None) -> None:
    global _cancelled, cancel_raised
    cancelled, _cancelled = _cancelled, False
    if not _armed:  # stray: a timer that fired as it was disarmed, a cancel too late
        return
    if cancelled:
        cancel_raised = True
        raise JobCancelled()
    raise JobTimeout()
