"""One shared-memory record per child: the job it runs, its deadline, jobs done.

The child writes it at every job start and end without a system call; the master
reads it on its own schedule to decide overtime kills and to know which job a dead
child held. Like gunicorn's workertmp, but in an anonymous shared mapping made
before the fork instead of a file. A sequence number (odd while writing) lets the
reader retry a torn read; there is one writer per record.
"""

from __future__ import annotations

import mmap
import struct
import time
from dataclasses import dataclass

# Seconds past a job's deadline (the child's own soft timeout) before the master's SIGTERM,
# and an orphaned child's own SIGKILL (orphan.py).
KILL_GRACE = 3.0
# seq, job id (0 = none), started (CLOCK_MONOTONIC), timeout, jobs, of which failed
_FORMAT = struct.Struct("<QqddQQ")


@dataclass(frozen=True)
class Entry:
    job_id: int | None
    started: float  # time.monotonic() when the job started (CLOCK_MONOTONIC is system-wide)
    timeout: float
    jobs: int
    failed: int = 0  # of `jobs`, those that did not succeed (the throughput chart's "failed")

    @property
    def deadline(self) -> float:
        return self.started + self.timeout


class Scoreboard:
    def __init__(self) -> None:
        self._buf = mmap.mmap(-1, _FORMAT.size)  # MAP_SHARED | MAP_ANONYMOUS: survives fork
        self._seq = 0

    def write(self, job_id: int | None, timeout: float, jobs: int, failed: int = 0) -> None:
        """Child side: publish the job starting now (None when between jobs)."""
        self._seq += 1
        _FORMAT.pack_into(self._buf, 0, self._seq, 0, 0.0, 0.0, 0, 0)  # odd: being written
        self._seq += 1
        now = time.monotonic()
        _FORMAT.pack_into(self._buf, 0, self._seq, job_id or 0, now, timeout, jobs, failed)

    def read(self) -> Entry:
        """Master side: a consistent snapshot (retries while the child is mid-write)."""
        for _ in range(1000):
            seq, job_id, started, timeout, jobs, failed = _FORMAT.unpack_from(self._buf, 0)
            if seq % 2 == 0 and _FORMAT.unpack_from(self._buf, 0)[0] == seq:
                return Entry(job_id or None, started, timeout, jobs, failed)
        return Entry(None, 0.0, 0.0, 0)

    def close(self) -> None:
        self._buf.close()
