"""`Queue.wait` woken by the worker that ends the job, on the same host.

A waiter binds a datagram socket `<runtime dir>/<database key>/wait/<job id>.<pid>.<n>.sock`
in each daemon directory it can find (the ones a producer's nudge goes to), before it
first reads the job, so no end is missed between its read and its sleep. A worker that
ends a job someone may wait for (one that keeps its result, or ends dead) lists that
directory for the job's id and sends each socket found one byte: a listing of a small
directory, only for those jobs, never on the path of a job that keeps nothing and
succeeds. Everything is best effort: a waiter that cannot bind (another user's
directory, no daemon here) and a job ended on another host are found by the waiter's
own poll, which backs off to `Queue.wait`'s longest nap.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import socket

from supervisor.wake.places import (
    ENV_RUNTIME_DIR,
    SOCKET_SUFFIX,
    daemon_runtime_dir,
    database_key,
    enabled,
    producer_dirs,
)

WAIT_DIR = "wait"
_serial = itertools.count()


def worker_wait_dir(identity: str) -> str:
    """Where the waiters of this daemon's database bind (its own runtime directory)."""
    base, _ = daemon_runtime_dir()
    return os.path.join(base, database_key(identity), WAIT_DIR)


def wake_waiters(directory: str, job_id: int) -> int:
    """Send one byte to every waiter of `job_id` in `directory`; how many were sent."""
    prefix = f"{job_id}."
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return 0
    sent = 0
    if names:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            for name in names:
                with contextlib.suppress(OSError):  # gone, full: its poll finds the end
                    sock.sendto(b"!", os.path.join(directory, name))
                    sent += 1
        finally:
            sock.close()
    return sent


class Waiter:
    """The sockets one `Queue.wait` listens on; `nap(seconds)` returns early when woken."""

    def __init__(self, identity: str | None, job_id: int) -> None:
        self.socks: list[tuple[socket.socket, str]] = []
        if identity is None or not enabled():
            return
        name = f"{job_id}.{os.getpid()}.{next(_serial)}{SOCKET_SUFFIX}"
        for directory, private in producer_dirs(identity, os.environ.get(ENV_RUNTIME_DIR, "")):
            self._bind(os.path.join(directory, WAIT_DIR), name, directory, private)

    def _bind(self, wait_dir: str, name: str, parent: str, private: bool) -> None:
        try:
            if not os.path.isdir(parent) or (private and os.stat(parent).st_uid != os.getuid()):
                return
            with contextlib.suppress(FileExistsError):
                os.mkdir(wait_dir, 0o700)
            path = os.path.join(wait_dir, name)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.setblocking(False)
            sock.bind(path)
            self.socks.append((sock, path))
        except OSError:
            return  # no wake-up from here: the poll finds the end

    @property
    def listening(self) -> bool:
        return bool(self.socks)

    def nap(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True when a worker said the job ended."""
        if not self.socks:
            select.select([], [], [], max(0.0, seconds))
            return False
        ready, _, _ = select.select([s for s, _ in self.socks], [], [], max(0.0, seconds))
        for sock in ready:
            with contextlib.suppress(OSError):
                while sock.recv(16):
                    pass
        return bool(ready)

    def close(self) -> None:
        for sock, path in self.socks:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.socks = []

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
