"""The master's children: forking them, reading their pipes, reaping them, and carrying
out kills. What to kill and when is decided in decisions.py; this module does it.

Each child gets two pipes (status: child → master; wake: master → child) and a shared
scoreboard record (the job it runs, with its deadline), made before the fork.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

from supervisor import events
from supervisor.config import Config
from supervisor.daemon.child import ChildSpec, child_crashed, run_child
from supervisor.daemon.decisions import overtime_due, retire_deadline
from supervisor.daemon.ledger import Ledger, LockFile
from supervisor.daemon.scoreboard import KILL_GRACE, Scoreboard
from supervisor.daemon.state import Child, KillCause, PoolState, Termination
from supervisor.kinds import RetireReason
from supervisor.proc import fork_process, kill_group, process_name, reap
from supervisor.timing import Stats, absorb

TERM_TO_KILL = 2.0  # seconds between SIGTERM and SIGKILL of an overtime child
# A cancelled job must end within 2 s of the request (SPEC), and a child takes SIGTERM
# as "finish this job, then exit": its group gets SIGKILL soon after.
CANCEL_TERM_TO_KILL = 0.5


class Children:
    """Every live child by pid, and what the master does to them."""

    def __init__(self, log: Any, host: str, master_name: str) -> None:
        self.log = log
        self.host = host
        self.master_name = master_name
        self.by_pid: dict[int, Child] = {}
        self.lock_file = LockFile()  # the ledgers' locks (one byte each), shared with children
        self.timing: dict[str, Stats] = {}  # per handler, from the children's T lines, unwritten

    def __iter__(self) -> Iterator[Child]:
        return iter(list(self.by_pid.values()))

    def __len__(self) -> int:
        return len(self.by_pid)

    def of(self, pool: str, *, retiring: bool = False) -> list[Child]:
        """A pool's children; the retiring ones only when asked."""
        return [c for c in self.by_pid.values() if c.pool == pool and (retiring or not c.retiring)]

    def fds(self) -> list[int]:
        """Every pipe end the master holds for its children (a new child closes them)."""
        return [fd for c in self.by_pid.values() for fd in (c.status_r, c.wake_w) if fd >= 0]

    # --- fork and pipes ----------------------------------------------------------------

    def spawn(
        self, config: Config, pool: PoolState, now: float, close_fds: list[int], schema: int | None
    ) -> Child:
        slot = pool.free_slot()
        status_r, status_w = os.pipe()
        wake_r, wake_w = os.pipe()
        token = process_name().rsplit(":", 1)[1]
        board = Scoreboard()
        ledger = Ledger(self.lock_file)

        def body() -> int:  # in the child
            ledger.slot = os.getpid()
            name = f"{self.host}:{os.getpid()}:{token}"
            spec = ChildSpec(
                pool.config, slot, name, os.getppid(), status_w, wake_r, board,
                self.master_name, ledger, pool.sizing, schema,
            )  # fmt: skip
            return run_child(config, spec)

        pid = fork_process(body, [status_r, wake_w, *close_fds, *self.fds()], child_crashed)
        with contextlib.suppress(OSError):  # the child does it too; whoever runs first wins
            os.setpgid(pid, pid)
        os.close(status_w)
        os.close(wake_r)
        os.set_blocking(status_r, False)
        os.set_blocking(wake_w, False)
        ledger.slot = pid
        child = Child(
            pid=pid,
            name=f"{self.host}:{pid}:{token}",
            pool=pool.config.name,
            slot=slot,
            status_r=status_r,
            wake_w=wake_w,
            started=now,
            board=board,
            ledger=ledger,
            on_success=pool.config.on_success,
        )
        self.by_pid[pid] = child
        pool.slots.add(slot)
        self.log.info(events.CHILD_SPAWNED, pool=child.pool, child_pid=pid, slot=slot)
        return child

    def read(self, fd: int, now: float) -> bool:
        """Read a child's status pipe if `fd` is one; False when it is not."""
        child = next((c for c in self.by_pid.values() if c.status_r == fd), None)
        if child is None:
            return False
        self._read_status(child, now)
        return True

    def _read_status(self, child: Child, now: float) -> bool:
        """Read what the child's status pipe holds now; True when there was something,
        False at EOF (the pipe is then closed) or when nothing waits."""
        try:
            data = os.read(child.status_r, 65536)
        except BlockingIOError:
            return False
        if not data:  # EOF: the child is exiting; SIGCHLD will follow
            os.close(child.status_r)
            child.status_r = -1
            return False
        child.buffer += data
        *lines, child.buffer = child.buffer.split(b"\n")
        for line in lines:
            message = line.decode(errors="replace")
            if message[:2] == "T ":  # per-handler timing (supervisor/timing.py)
                absorb(self.timing, message[2:])
                continue
            child.on_message(message, now)
            if message == "M":  # its claim was full: an idle sibling takes the rest now
                self.wake_idle(child.pool, 1)
        return True

    def wake(self, child: Child) -> None:
        try:
            os.write(child.wake_w, b"w")
            child.woken()
        except (BlockingIOError, BrokenPipeError):
            pass

    def wake_all(self) -> None:
        """A byte to every child: the database answers again. One in a back-off tries at
        once (what it finished is written before its lease runs out); an idle one claims."""
        for child in self.by_pid.values():
            self.wake(child)

    def wake_idle(self, pool: str, most: int) -> None:
        """Wake up to `most` idle children of `pool` (jobs went back to its queue)."""
        idle = [c for c in self.of(pool) if c.is_idle()]
        for child in idle[:most]:
            self.wake(child)

    # --- reaping -----------------------------------------------------------------------

    def reap(self) -> Iterator[tuple[int, int, Child | None]]:
        """(pid, wait status, our child or None) of every exited process, pipes closed."""
        for pid, status in reap():
            child = self.by_pid.get(pid)
            if child is not None:
                # What it wrote last (its final timing line) may not have been read yet:
                # SIGCHLD can wake the loop before its pipe does.
                while child.status_r >= 0 and self._read_status(child, time.monotonic()):
                    pass
                del self.by_pid[pid]
                for fd in (child.status_r, child.wake_w):
                    if fd >= 0:
                        with contextlib.suppress(OSError):
                            os.close(fd)
                child.status_r = child.wake_w = -1
            yield pid, status, child

    def kill_strays(self, known: set[int | None]) -> None:
        """Processes we never forked: what a job left behind when its child was SIGKILLed
        (no chance to sweep its descendants); the master is their subreaper. Direct
        children only, so a pid cannot be reused before we reap it. `known` are the
        master's other children (the check tick, the metrics server)."""
        ours = known | set(self.by_pid)
        try:
            with open(f"/proc/self/task/{os.getpid()}/children") as listing:
                pids = [int(p) for p in listing.read().split()]
        except OSError:  # not Linux: nothing is adopted either
            return
        for pid in pids:
            if pid not in ours:
                self.log.warning(events.STRAY_KILLED, pid=pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    # --- kills -------------------------------------------------------------------------

    def kill_overtime(self, now: float) -> None:
        """Two stages, from local state only (the scoreboard): SIGTERM the group, then SIGKILL."""
        for child in self.by_pid.values():
            ending = child.ending
            if ending is not None:
                if ending.kill_at is not None and now >= ending.kill_at:
                    kill_group(child.pid, signal.SIGKILL)
                    ending.kill_at = None
                continue
            entry = child.board.read()
            job_id = entry.job_id
            if job_id is None or not overtime_due(job_id, entry.deadline, now, KILL_GRACE):
                continue
            self.log.warning(
                events.JOB_TIMED_OUT,
                pool=child.pool,
                child_pid=child.pid,
                job_id=job_id,
                timeout=entry.timeout,
            )
            kill_group(child.pid, signal.SIGTERM)
            child.ending = Termination(
                KillCause.OVERTIME, job_id, now + TERM_TO_KILL, entry.timeout
            )

    def next_kill(self) -> float | None:
        """When the next signal to an overtime or unretired child is due (monotonic)."""
        dues = []
        for child in self.by_pid.values():
            if child.retire_by is not None and not child.sigkilled:
                dues.append(child.retire_by)
            if child.ending is not None:
                if child.ending.kill_at is not None:
                    dues.append(child.ending.kill_at)
                continue
            entry = child.board.read()
            if entry.job_id:
                dues.append(entry.deadline + KILL_GRACE)
        return min(dues, default=None)

    def retire(self, child: Child, now: float, reason: RetireReason, grace: float) -> None:
        """Ask a child to finish its current job and exit (shrink, HUP, TTOU, stop)."""
        if child.retiring:
            return
        entry = child.board.read()
        job_ends_by = entry.deadline + KILL_GRACE + TERM_TO_KILL if entry.job_id else None
        child.retire_by = retire_deadline(now, grace, job_ends_by)
        child.exit_reason = reason
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGTERM)

    def kill_unretired(self, now: float) -> None:
        """Retiring children still alive past their deadline ignored SIGTERM: kill them
        (what they held goes back to ready uncounted, as at shutdown)."""
        for child in self.by_pid.values():
            if child.retire_by is not None and not child.sigkilled and now >= child.retire_by:
                self.log.warning(
                    events.CHILD_IGNORED_RETIRE,
                    pool=child.pool,
                    child_pid=child.pid,
                    job_id=child.now_running,
                )
                self.kill(child)

    def cancel(self, child: Child, job_id: int, now: float) -> None:
        """Kill a child whose job was cancelled: SIGTERM its group, SIGKILL after
        CANCEL_TERM_TO_KILL (the overtime path's second stage does it)."""
        if child.ending is not None:
            return
        self.log.warning(
            events.JOB_CANCEL_KILL, pool=child.pool, child_pid=child.pid, job_id=job_id
        )
        kill_group(child.pid, signal.SIGTERM)
        child.ending = Termination(KillCause.CANCEL, job_id, now + CANCEL_TERM_TO_KILL)

    def kill(self, child: Child) -> None:
        """SIGKILL a child's group at once; what it held goes back to ready uncounted."""
        child.sigkilled = True
        kill_group(child.pid, signal.SIGKILL)
