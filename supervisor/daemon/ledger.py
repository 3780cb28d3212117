"""What a pool child holds and has not started, shared with the master so that no job
waits behind another while a worker of its pool is free.

A child claims a batch of quick jobs in one transaction (the claim's cost is per batch,
not per job), but it cannot know the next job is slow before it runs it. So the jobs it
claimed and has not started sit in this ledger, and when the job it runs goes on past
the hand-back grace, the master takes them back (handback.py) and returns them to the
queue, where an idle sibling — or another host — claims them at once. The successes the
child has not acknowledged yet are listed here too, so the master can write them while
the child is busy: a finished job is never shown as running behind a slow one.

A job is never both handed back and started: the child starts a held job only after
taking it out of the ledger, and the master takes jobs out only, both under one lock.
The lock is a POSIX record lock on one byte of a file the master opened before forking
(the byte is the child's pid): the kernel drops it when its holder dies, so a child
SIGKILLed inside the critical section cannot wedge the master. The critical sections
touch only this mapping: nobody does I/O while holding the lock.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

from supervisor.daemon.scoreboard import Scoreboard

CAPACITY = 256  # jobs a child may hold unstarted, and successes it may leave to the master

# unstarted count, done count, taken count, first job of the batch, job started unmarked
_HEAD = struct.Struct("<IIIqq")
_IDS = struct.Struct(f"<{CAPACITY}q")
_UNSTARTED = _HEAD.size
_DONE = _UNSTARTED + _IDS.size
_TAKEN = _DONE + _IDS.size
_SIZE = _TAKEN + _IDS.size


class Holding(StrEnum):
    """Where a job a child holds stands, as the master finds it under the lock."""

    RUNNING = "running"  # its handler runs now
    UNSTARTED = "unstarted"  # claimed, not started: taken out, it will never start here
    SUCCEEDED = "succeeded"  # finished well, not acknowledged: the master writes it
    NOT_HELD = "not held"  # none of these: its outcome is written or being written


@dataclass(frozen=True)
class Taken:
    """What the master took from a child to write in its stead."""

    unstarted: list[int]
    successes: list[int]
    unmarked: int | None  # the running job, claimed behind another: its start is unrecorded

    def __bool__(self) -> bool:
        return bool(self.unstarted or self.successes or self.unmarked)


class LockFile:
    """The one file whose bytes are the ledgers' locks; opened before the first fork."""

    def __init__(self) -> None:
        self._fd, path = tempfile.mkstemp(prefix="forkq-ledgers-")
        os.unlink(path)  # nothing is left behind; the descriptor keeps it

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        os.close(self._fd)


class Ledger:
    def __init__(self, lock_file: LockFile) -> None:
        self._buf = mmap.mmap(-1, _SIZE)  # MAP_SHARED | MAP_ANONYMOUS: survives fork
        self._lock_fd = lock_file.fileno()
        self.slot = 0  # the locked byte: the child's pid, set on both sides after the fork

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.lockf(self._lock_fd, fcntl.LOCK_EX, 1, self.slot)
        try:
            yield
        finally:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, self.slot)

    def _head(self) -> tuple[int, int, int, int, int]:
        return _HEAD.unpack_from(self._buf, 0)

    def _ids(self, offset: int, count: int) -> list[int]:
        return list(_IDS.unpack_from(self._buf, offset)[:count])

    def _put(self, offset: int, ids: Sequence[int]) -> None:
        struct.pack_into(f"<{len(ids)}q", self._buf, offset, *ids)

    def _set_head(self, unstarted: int, done: int, taken: int, first: int, unmarked: int) -> None:
        _HEAD.pack_into(self._buf, 0, unstarted, done, taken, first, unmarked)

    # --- the child's side ----------------------------------------------------------------

    def hold(self, ids: Sequence[int]) -> None:
        """A claimed batch, in the order it will run (at most CAPACITY jobs)."""
        with self._locked():
            _, done, taken, _, unmarked = self._head()
            self._put(_UNSTARTED, ids)
            self._set_head(len(ids), done, taken, ids[0] if ids else 0, unmarked)

    def start(self, job_id: int, publish: Callable[[], None]) -> bool:
        """Take a held job to run it; False when the master took it back. `publish` (the
        scoreboard's job start) runs under the lock, so the master never sees the job
        neither held nor running."""
        with self._locked():
            unstarted, done, taken, first, _ = self._head()
            held = self._ids(_UNSTARTED, unstarted)
            if job_id not in held:
                return False
            held.remove(job_id)
            self._put(_UNSTARTED, held)
            self._set_head(len(held), done, taken, first, 0 if job_id == first else job_id)
            publish()
            return True

    def succeeded(self, job_id: int) -> None:
        """A success waiting for its acknowledgement; the master may write it first. When
        the list is full it is not listed, and only the child writes it."""
        with self._locked():
            unstarted, done, taken, first, unmarked = self._head()
            if done < CAPACITY:
                struct.pack_into("<q", self._buf, _DONE + 8 * done, job_id)
                self._set_head(unstarted, done + 1, taken, first, unmarked)

    def written_elsewhere(self) -> list[int]:
        """Before the child writes its successes: those the master wrote (forget them), and
        the list emptied, so the master takes none of the rest from now on."""
        with self._locked():
            unstarted, _, taken, first, unmarked = self._head()
            ids = self._ids(_TAKEN, taken)
            self._set_head(unstarted, 0, 0, first, unmarked)
            return ids

    # --- the master's side ---------------------------------------------------------------

    def pending(self) -> bool:
        """Anything the master could take (read without the lock: only to plan its wake)."""
        unstarted, done, _, _, unmarked = self._head()
        return bool(unstarted or done or unmarked)

    def take(self, running: int) -> Taken:
        """The child runs `running` past the grace: take what it holds unstarted and its
        unwritten successes (as many as the taken list has room for)."""
        with self._locked():
            unstarted, done, taken, first, unmarked = self._head()
            back = self._ids(_UNSTARTED, unstarted)
            room = CAPACITY - taken
            successes = self._ids(_DONE, done)
            moved, kept = successes[:room], successes[room:]
            self._put(_TAKEN + 8 * taken, moved)
            self._put(_DONE, kept)
            self._set_head(0, len(kept), taken + len(moved), first, 0)
            return Taken(back, moved, unmarked if unmarked == running else None)

    def find(self, job_id: int, board: Scoreboard) -> Holding:
        """Where `job_id` stands for the cancel path; an unstarted job is taken out (it will
        never start here) and a success moved to the taken list (the master writes it)."""
        with self._locked():
            if board.read().job_id == job_id:
                return Holding.RUNNING
            unstarted, done, taken, first, unmarked = self._head()
            held = self._ids(_UNSTARTED, unstarted)
            if job_id in held:
                held.remove(job_id)
                self._put(_UNSTARTED, held)
                self._set_head(len(held), done, taken, first, unmarked)
                return Holding.UNSTARTED
            successes = self._ids(_DONE, done)
            if job_id in successes and taken < CAPACITY:
                successes.remove(job_id)
                self._put(_DONE, successes)
                struct.pack_into("<q", self._buf, _TAKEN + 8 * taken, job_id)
                self._set_head(unstarted, len(successes), taken + 1, first, unmarked)
                return Holding.SUCCEEDED
            return Holding.NOT_HELD

    def close(self) -> None:
        self._buf.close()
