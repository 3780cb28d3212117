"""The producer's side of the wake-up: one datagram to every local master of a database."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from datetime import UTC, datetime

from supervisor.models import NewJob
from supervisor.wake.places import (
    ENV_RUNTIME_DIR,
    MAX_DATAGRAM,
    MAX_NAME_BYTES,
    MAX_SOCKETS,
    RELIST_AFTER,
    SOCKET_SUFFIX,
    enabled,
    producer_dirs,
    store_identity,
)


class Nudger:
    """A producer's sender for one database; `Queue` keeps one.

    What can be cached is: the environment is read once, here; the sockets to send to
    are listed at most once per RELIST_AFTER seconds (so a master started or restarted
    is reached within that time; meanwhile the poll finds its jobs); the sending socket
    is made on the first datagram, never when no daemon directory exists.
    """

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.enabled = enabled()
        self.dirs = producer_dirs(identity, os.environ.get(ENV_RUNTIME_DIR, ""))
        self.paths: list[str] = []
        self.relist_at = 0.0  # monotonic

    @classmethod
    def for_store(cls, store: object) -> Nudger | None:
        """A nudger for a store's database; None when turned off or the database is unknown."""
        identity = store_identity(store)
        return cls(identity) if identity is not None and enabled() else None

    def nudge(self, queues: Iterable[str]) -> None:
        """Tell every local master serving this database that `queues` have jobs now.

        Best effort: never raises, never blocks. A full socket, a dead master's socket
        or a refused send is skipped; the daemon's poll finds the job anyway.
        """
        try:
            if not self.enabled:
                return
            now = time.monotonic()
            if now >= self.relist_at:
                self.paths = [path for d, private in self.dirs for path in _sockets_in(d, private)]
                self.relist_at = now + RELIST_AFTER
            if self.paths:
                payload = _payload(queues)
                if payload:
                    _send(self.paths, payload)
        except Exception:  # a nudge must never fail an enqueue
            return

    def nudge_jobs(self, jobs: Iterable[NewJob]) -> None:
        """`nudge` the queues of the jobs due now (a job for later needs no hurry)."""
        try:
            if not self.enabled:
                return
            now: datetime | None = None
            queues = set()
            for job in jobs:
                if job.delay > 0:
                    continue
                if job.run_at is not None:
                    now = now or datetime.now(UTC)
                    if job.run_at > now:
                        continue
                queues.add(job.queue)
            if queues:
                self.nudge(queues)
        except Exception:
            return


def nudge(identity: str, queues: Iterable[str]) -> None:
    """A one-off nudge (`database_identity(url)`); a repeated producer keeps a `Nudger`."""
    Nudger(identity).nudge(queues)


def _payload(queues: Iterable[str]) -> bytes:
    """Names one a line, as many as fit in one datagram."""
    out = bytearray()
    for name in dict.fromkeys(queues):
        raw = name.encode("utf-8", "replace")
        if not raw or b"\n" in raw or len(raw) > MAX_NAME_BYTES:
            continue
        if len(out) + len(raw) + 1 > MAX_DATAGRAM:
            break
        out += raw + b"\n"
    return bytes(out)


def _sockets_in(directory: str, private: bool) -> list[str]:
    """The sockets in `directory` (none if it is missing, or in a per-user dir not ours)."""
    try:
        if private and os.stat(directory).st_uid != os.getuid():
            return []
        names = sorted(n for n in os.listdir(directory) if n.endswith(SOCKET_SUFFIX))
    except OSError:
        return []
    return [os.path.join(directory, n) for n in names[:MAX_SOCKETS]]


def _send(paths: list[str], payload: bytes) -> None:
    sock = _sender_socket()
    for path in list(paths):
        try:
            sock.sendto(payload, path)
        except ConnectionRefusedError:  # a dead master's socket: skip it until relisted
            paths.remove(path)
        except OSError:  # full (EAGAIN), gone, not allowed: the poll covers it
            continue


_sender: socket.socket | None = None
_sender_pid = 0


def _sender_socket() -> socket.socket:
    """One unbound, non-blocking datagram socket per process (made anew after a fork)."""
    global _sender, _sender_pid
    if _sender is None or _sender_pid != os.getpid():
        if _sender is not None:
            _sender.detach()  # the parent's: leave its fd alone, whatever it is now
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        _sender, _sender_pid = sock, os.getpid()
    return _sender
