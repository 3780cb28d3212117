"""What the master hands the metrics server, without a pipe it would have to serve.

- `Pulse`: the master loop's last turn, and when the database last answered the master
  and whether its breaker is open (dbguard.py), in an anonymous shared mapping made
  before the server's fork. The master writes it on every loop turn (no system call);
  the server reads it per request. A sequence number (odd while writing) lets the
  reader retry a torn read; there is one writer.
- `Check`: what the last check tick saw (database answered or not, the queue figures
  and alerts on the chores holder), a small JSON file in the metrics directory written
  once per tick report and renamed into place, so a reader sees the old or the new one.

Neither ever blocks the master on a reader.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import time
from dataclasses import asdict, dataclass, field
from typing import Any

CHECK_FILE = "check.json"  # not *.db: prometheus-client's collector globs those
# Several databases: the supervisor names them in DATABASES_FILE ({"names": [...],
# "queues": {queue: database}}); each master writes check-NAME.json and its pulse in
# pulse-NAME (a file the server maps, as it is forked before or after a master).
DATABASES_FILE = "databases.json"
_PULSE = struct.Struct("<Qddddd")  # seq, monotonic, wall, db answered, db limit, breaker open


@dataclass(frozen=True)
class Beat:
    """One read of the pulse; times on the monotonic clock except `wall`."""

    at: float  # the loop's last turn
    wall: float
    db_answered_at: float  # the master's last database call that answered; 0.0: unknown
    db_limit: float  # seconds without an answer, breaker open, before /healthz says 503
    db_out: bool  # the master's breaker is open: its last call got no answer


class Pulse:
    def __init__(self, path: str | None = None) -> None:
        self._seq = 0
        if path is None:
            self._buf = mmap.mmap(-1, _PULSE.size)  # MAP_SHARED | MAP_ANONYMOUS: survives fork
            return
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            if os.fstat(fd).st_size < _PULSE.size:
                os.ftruncate(fd, _PULSE.size)
            self._buf = mmap.mmap(fd, _PULSE.size)
        finally:
            os.close(fd)

    def beat(
        self, db_answered_at: float = 0.0, db_limit: float = 0.0, db_out: bool = False
    ) -> None:
        """Master side: the loop turned now."""
        self._seq += 1
        _PULSE.pack_into(self._buf, 0, self._seq, 0.0, 0.0, 0.0, 0.0, 0.0)  # odd: being written
        self._seq += 1
        fields = (time.monotonic(), time.time(), db_answered_at, db_limit, float(db_out))
        _PULSE.pack_into(self._buf, 0, self._seq, *fields)

    def read(self) -> Beat | None:
        """Server side: the last turn; None before the first."""
        for _ in range(1000):
            seq, mono, wall, answered, limit, out = _PULSE.unpack_from(self._buf, 0)
            if seq % 2 == 0 and _PULSE.unpack_from(self._buf, 0)[0] == seq:
                return None if seq == 0 else Beat(mono, wall, answered, limit, out != 0.0)
        return None


@dataclass(frozen=True)
class Check:
    """One check's result as the server reads it; times on the monotonic and wall clocks."""

    checked_at: float
    checked_wall: float
    stale_after: float  # seconds after which it says nothing (a hung or dead tick)
    db_error: str | None = None
    leader: bool = False  # this host held the chores lease: the queue figures are its
    queues: list[dict[str, Any]] | None = None  # QueueStats.as_dict(); None on non-holders
    alerts: list[tuple[str, str, bool]] = field(default_factory=list)  # (rule, queue, firing)


def pulse_path(directory: str, database: str) -> str:
    return os.path.join(directory, f"pulse-{database}")


def check_path(directory: str, database: str | None) -> str:
    return os.path.join(directory, CHECK_FILE if database is None else f"check-{database}.json")


def write_databases(directory: str, names: list[str], queues: dict[str, str]) -> None:
    temporary = os.path.join(directory, f"{DATABASES_FILE}.tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump({"names": names, "queues": queues}, file)
    os.replace(temporary, os.path.join(directory, DATABASES_FILE))


def read_databases(directory: str) -> tuple[list[str], dict[str, str]]:
    """The databases' names and which named database holds each queue; ([], {}) if none."""
    with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
        with open(os.path.join(directory, DATABASES_FILE), encoding="utf-8") as file:
            data = json.load(file)
        return [str(n) for n in data["names"]], {str(q): str(d) for q, d in data["queues"].items()}
    return [], {}


def write_check(directory: str, check: Check, database: str | None = None) -> None:
    """Replace the check file atomically (a small local write, once per tick report)."""
    path = check_path(directory, database)
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(asdict(check), file)
    os.replace(temporary, path)


def read_check(directory: str, database: str | None = None) -> Check | None:
    """The last check, or None when there is none (yet) or it cannot be read."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        with open(check_path(directory, database), encoding="utf-8") as file:
            data = json.load(file)
        data["alerts"] = [(str(r), str(q), bool(f)) for r, q, f in data.get("alerts", [])]
        return Check(**data)
    return None
