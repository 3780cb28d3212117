"""A job's leftover processes: whatever a handler started is killed when its job ends.

A pool child makes itself a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): a process
whose parent exits — a shell's `cmd &`, a double fork, a `setsid` escape into a session
of its own — is re-parented to the pool child instead of to init. So every process a
job started stays in the pool child's tree, whatever process group or session it moved
to, and the child can find it by walking its descendants.

After each job the child reaps what has exited and, when a descendant is still alive,
sends every descendant SIGTERM, then SIGKILL after a short grace, and reaps them. The
pool child starts no process of its own, so every descendant belongs to the job that
just ended. The common case costs one `waitpid(-1, WNOHANG)` that answers "no
children"; psutil (a walk of /proc) is imported only when something is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from supervisor import events, logs
from supervisor.proc import prctl

if TYPE_CHECKING:
    import psutil

PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_GRACE = 1.0  # seconds from SIGTERM to SIGKILL
KILL_WAIT = 5.0  # seconds past the grace to wait for SIGKILLed ones (a process in D state)
SWEEP_INTERVAL = 0.01  # seconds between looks while waiting


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux 3.4+); False where the kernel cannot."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def reap_children() -> bool:
    """Reap every child that has exited, without blocking; True if one is still alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


@dataclass(frozen=True)
class Sweep:
    killed: int  # descendants that were alive and were signalled
    forced: int  # of them, still alive after the grace: SIGKILLed
    survivors: int  # still alive after KILL_WAIT (unkillable for now); 0 normally


def sweep(grace: float = LEFTOVER_GRACE, wait: float = KILL_WAIT) -> Sweep:
    """SIGTERM every live descendant, SIGKILL what is left after `grace`, reap them all.

    Looks again on every round: a descendant may fork while it is being killed, and its
    orphans come to us. A process is signalled through psutil, which checks that its pid
    still names the process it listed (not a reused pid).
    """
    import psutil  # only when something was left: never on the way to the first fork

    me = psutil.Process()
    termed: set[int] = set()
    forced: set[int] = set()
    started = time.monotonic()
    while True:
        child_alive = reap_children()
        live = _live_descendants(me)
        elapsed = time.monotonic() - started
        if not live and not child_alive:
            return Sweep(len(termed | forced), len(forced), 0)
        if elapsed >= grace + wait:
            return Sweep(len(termed | forced), len(forced), len(live))
        for proc in live:
            if elapsed >= grace and proc.pid not in forced:
                _signal(proc, signal.SIGKILL)
                forced.add(proc.pid)
            elif proc.pid not in termed:
                _signal(proc, signal.SIGTERM)
                _signal(proc, signal.SIGCONT)  # a stopped process gets to act on its SIGTERM
                termed.add(proc.pid)
        time.sleep(SWEEP_INTERVAL)


def _live_descendants(me: psutil.Process) -> list[psutil.Process]:
    import psutil

    live = []
    try:
        found = me.children(recursive=True)
    except psutil.Error:
        return []
    for proc in found:
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                live.append(proc)
    return live


def _signal(proc: psutil.Process, sig: int) -> None:
    import psutil

    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)


def kill_leftovers(job_id: int | None) -> Sweep | None:
    """End whatever the job that just ended left running (`job_id` None: at the child's
    exit); logs how many were killed. None when nothing was left (the common case)."""
    if not reap_children():
        return None
    result = sweep()
    logs.get().warning(
        events.JOB_LEFTOVERS_KILLED,
        job_id=job_id,
        killed=result.killed,
        sigkilled=result.forced,
        survivors=result.survivors,
    )
    return result
