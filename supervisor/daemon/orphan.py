"""A child whose master died still ends a job that overruns its timeout.

The master kills a child whose job runs past its timeout. A child left without its
master (killed -9, OOM-killed) gets SIGTERM from the kernel (PR_SET_PDEATHSIG), which
lets it finish the current job, hand back the rest and exit. But a handler stuck past its
timeout, or one that blocks SIGTERM and SIGALRM, would then run for ever, and once its
lease expired a new daemon would run the same job beside it.

So each child has a guard thread. It sleeps in poll(2) on the child's wake pipe and
reads nothing: it wakes only when the pipe's write end is gone (POLLHUP: the master
died). Then it stops the worker (no job starts after the current one) and, if the
running job passes its deadline plus KILL_GRACE, as the master would have seen it on
the scoreboard, SIGKILLs the child's process group (the child and the programs of a
command handler). The job's lease (timeout + LEASE_MARGIN) outlasts that, so no other
worker can have it yet.

The thread is started with every signal blocked, and keeps them so: signals stay the
main thread's (the soft timeout's SIGALRM must interrupt the handler, not land here).
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable

from supervisor import events, logs
from supervisor.daemon.scoreboard import KILL_GRACE, Scoreboard

CHECK_EVERY = 0.5  # seconds between two looks at the scoreboard once orphaned
NOTE = (
    "its master is gone and its job ran past its timeout: killed; the job's lease expiry settles it"
)


def start_guard(wake_fd: int, board: Scoreboard, stop: Callable[[], None]) -> None:
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:  # the thread inherits the mask it starts with
        guard = threading.Thread(
            target=_guard, args=(wake_fd, board, stop), name="forkq-orphan-guard", daemon=True
        )
        guard.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _guard(wake_fd: int, board: Scoreboard, stop: Callable[[], None]) -> None:
    watch = select.poll()
    watch.register(wake_fd, 0)  # POLLHUP and POLLERR only: a wake-up stays unread
    while not watch.poll():
        pass
    stop()
    while True:
        entry = board.read()
        if entry.job_id is not None and time.monotonic() > entry.deadline + KILL_GRACE:
            # Its job goes back when its lease expires (the reaper counts the attempt).
            logs.get().error(events.ORPHAN_KILLED, job_id=entry.job_id, note=NOTE)
            os.killpg(0, signal.SIGKILL)  # our group (child.py made it): the child and its programs
        time.sleep(CHECK_EVERY)
