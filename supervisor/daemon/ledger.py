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
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum

from supervisor.daemon.scoreboard import Scoreboard

CAPACITY = 256  # jobs a child may hold unstarted, and successes it may leave to the master

# unstarted count, done count, taken count, claiming (1 while a claim is under way), first
# job of the batch, job started unmarked
_HEAD = struct.Struct("<IIIIqq")
_IDS = struct.Struct(f"<{CAPACITY}q")
_ID = struct.Struct("<q")
_FIELDS = {"unstarted": 0, "done": 1, "taken": 2, "claiming": 3, "first": 4, "unmarked": 5}
_UNSTARTED = _HEAD.size
_DONE = _UNSTARTED + _IDS.size
_TAKEN = _DONE + _IDS.size
_IDLE = _TAKEN + _IDS.size  # the pool's idle children, as the master last counted them
_SIZE = _IDLE + 4


class Holding(StrEnum):
    """Where a job a child holds stands, as the master finds it under the lock."""

    RUNNING = "running"  # its handler runs now
    UNSTARTED = "unstarted"  # claimed, not started: taken out, it will never start here
    SUCCEEDED = "succeeded"  # finished well, not acknowledged: the master writes it
    UNKNOWN = "unknown"  # a claim is under way, or the child holds the lock: look again later
    NOT_HELD = "not held"  # none of these: its outcome is written or being written


@dataclass(frozen=True)
class Taken:
    """What the master took from a child to write in its stead."""

    unstarted: list[int]
    successes: list[int]
    unmarked: int | None  # the running job, claimed behind another: its start is unrecorded
    running: int | None = None  # the job the child ran at the take (read under the lock)
    started: float = 0.0  # when it started (monotonic)

    def __bool__(self) -> bool:
        return bool(self.unstarted or self.successes or self.unmarked)


NOTHING = Taken([], [], None)


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
        """The child waits for the lock: the master holds it only for a few reads."""
        fcntl.lockf(self._lock_fd, fcntl.LOCK_EX, 1, self.slot)
        try:
            yield
        finally:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, self.slot)

    def _try_lock(self) -> bool:
        """The master never waits: a child stopped inside its critical section (SIGSTOP, a
        frozen cgroup) must not stop the master's loop. False: look again next turn."""
        try:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, self.slot)
        except OSError:
            return False
        return True

    def _unlock(self) -> None:
        fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, self.slot)

    def _head(self) -> tuple[int, int, int, int, int, int]:
        return _HEAD.unpack_from(self._buf, 0)

    def _ids(self, offset: int, count: int) -> list[int]:
        return list(struct.unpack_from(f"<{count}q", self._buf, offset)) if count else []

    def _put(self, offset: int, ids: Sequence[int]) -> None:
        struct.pack_into(f"<{len(ids)}q", self._buf, offset, *ids)

    def _set(self, **changes: int) -> None:
        values = list(_HEAD.unpack_from(self._buf, 0))
        for name, value in changes.items():
            values[_FIELDS[name]] = value
        _HEAD.pack_into(self._buf, 0, *values)

    # --- the child's side ----------------------------------------------------------------

    def claiming(self) -> None:
        """A claim is under way: until `hold`, a cancel cannot tell what this child holds."""
        with self._locked():
            self._set(claiming=1)

    def hold(self, ids: Sequence[int]) -> None:
        """A claimed batch, in the order it will run (at most CAPACITY jobs); [] when the
        claim took nothing or failed."""
        with self._locked():
            self._put(_UNSTARTED, ids)
            self._set(unstarted=len(ids), claiming=0, first=ids[0] if ids else 0)

    def unhold(self, ids: Collection[int]) -> list[int]:
        """Take `ids` off the held list (the child hands them back itself): those it still
        held, in order. The others the master took back already, and writes them."""
        gone = set(ids)
        with self._locked():
            held = self._ids(_UNSTARTED, self._head()[0])
            kept = [i for i in held if i not in gone]
            self._put(_UNSTARTED, kept)
            self._set(unstarted=len(kept))
            return [i for i in held if i in gone]

    def start(self, job_id: int, publish: Callable[[], None], success: int = 0) -> bool:
        """Take a held job to run it; False when the master took it back. `publish` (the
        scoreboard's job start) runs under the lock, so the master never sees the job
        neither held nor running. `success`: the previous job of the batch, succeeded and
        not acknowledged, listed under the same lock (one lock a job, not two)."""
        fcntl.lockf(self._lock_fd, fcntl.LOCK_EX, 1, self.slot)  # (per job: no wrapper)
        try:
            unstarted, done, taken, claiming, first, unmarked = _HEAD.unpack_from(self._buf, 0)
            if success and done < CAPACITY:
                _ID.pack_into(self._buf, _DONE + 8 * done, success)
                done += 1
            if unstarted and _ID.unpack_from(self._buf, _UNSTARTED)[0] == job_id:
                # The usual case, jobs start in the order held: shift the rest down in
                # place (one copy) instead of unpacking and repacking the whole list.
                end = _UNSTARTED + 8 * unstarted
                self._buf[_UNSTARTED : end - 8] = self._buf[_UNSTARTED + 8 : end]
                unstarted -= 1
            else:
                held = self._ids(_UNSTARTED, unstarted)
                if job_id not in held:
                    _HEAD.pack_into(self._buf, 0, unstarted, done, taken, claiming, first, unmarked)
                    return False
                held.remove(job_id)
                self._put(_UNSTARTED, held)
                unstarted = len(held)
            unmarked = 0 if job_id == first else job_id
            _HEAD.pack_into(self._buf, 0, unstarted, done, taken, claiming, first, unmarked)
            publish()
            return True
        finally:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, self.slot)

    def succeeded(self, job_id: int) -> None:
        """A success waiting for its acknowledgement; the master may write it first. When
        the list is full it is not listed, and only the child writes it."""
        fcntl.lockf(self._lock_fd, fcntl.LOCK_EX, 1, self.slot)
        try:
            unstarted, done, taken, claiming, first, unmarked = _HEAD.unpack_from(self._buf, 0)
            if done < CAPACITY:
                _ID.pack_into(self._buf, _DONE + 8 * done, job_id)
                _HEAD.pack_into(self._buf, 0, unstarted, done + 1, taken, claiming, first, unmarked)
        finally:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, self.slot)

    def written_elsewhere(self) -> list[int]:
        """Before the child writes its successes: those the master wrote (forget them), and
        the list emptied, so the master takes none of the rest from now on."""
        with self._locked():
            ids = self._ids(_TAKEN, self._head()[2])
            self._set(done=0, taken=0)
            return ids

    def idle_siblings(self) -> int:
        """How many of the pool's children were idle at the master's last look (a hint read
        without the lock: whether telling the master about a batch can help anyone now)."""
        return int(struct.unpack_from("<I", self._buf, _IDLE)[0])

    # --- the master's side ---------------------------------------------------------------

    def tell_idle(self, count: int) -> None:
        """The pool's idle children now (written without the lock: a hint)."""
        struct.pack_into("<I", self._buf, _IDLE, min(count, 0xFFFFFFFF))

    def pending(self) -> bool:
        """Anything the master could take (read without the lock: only to plan its wake)."""
        unstarted, done, _, _, _, unmarked = self._head()
        return bool(unstarted or done or unmarked)

    def take(self, board: Scoreboard, grace: float, now: float) -> Taken:
        """If the job the child runs (read here, under the lock) has run past `grace`: take
        what the child holds unstarted and its unwritten successes (as many as the taken
        list has room for). NOTHING when it runs no job, a quicker one, or holds the lock."""
        if not self._try_lock():
            return NOTHING
        try:
            entry = board.read()
            if entry.job_id is None or now - entry.started < grace:
                return NOTHING
            unstarted, done, taken, _, _, unmarked = self._head()
            back = self._ids(_UNSTARTED, unstarted)
            successes = self._ids(_DONE, done)
            moved, kept = successes[: CAPACITY - taken], successes[CAPACITY - taken :]
            self._put(_TAKEN + 8 * taken, moved)
            self._put(_DONE, kept)
            running = entry.job_id
            self._set(unstarted=0, done=len(kept), taken=taken + len(moved),
                      unmarked=0 if unmarked == running else unmarked)  # fmt: skip
            mark = running if unmarked == running else None
            return Taken(back, moved, mark, running, entry.started)
        finally:
            self._unlock()

    def find(self, job_id: int, board: Scoreboard) -> Holding:
        """Where `job_id` stands for the cancel path; an unstarted job is taken out (it will
        never start here) and a success moved to the taken list (the master writes it)."""
        if not self._try_lock():
            return Holding.UNKNOWN
        try:
            if board.read().job_id == job_id:
                return Holding.RUNNING
            unstarted, done, taken, claiming, _, _ = self._head()
            if claiming:
                return Holding.UNKNOWN
            held = self._ids(_UNSTARTED, unstarted)
            if job_id in held:
                held.remove(job_id)
                self._put(_UNSTARTED, held)
                self._set(unstarted=len(held))
                return Holding.UNSTARTED
            successes = self._ids(_DONE, done)
            if job_id in successes and taken < CAPACITY:
                successes.remove(job_id)
                self._put(_DONE, successes)
                struct.pack_into("<q", self._buf, _TAKEN + 8 * taken, job_id)
                self._set(done=len(successes), taken=taken + 1)
                return Holding.SUCCEEDED
            return Holding.NOT_HELD
        finally:
            self._unlock()

    def close(self) -> None:
        self._buf.close()
