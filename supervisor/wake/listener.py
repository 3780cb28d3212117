"""The master's side of the wake-up: its socket, bound per database, and its drain."""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from typing import Any

from supervisor import events
from supervisor.dburl import DatabaseURL
from supervisor.wake.places import (
    ENV_WAKE,
    MAX_DATAGRAM,
    MAX_DATAGRAMS_PER_DRAIN,
    MAX_NAME_BYTES,
    MAX_NAMES_PER_DRAIN,
    SOCKET_SUFFIX,
    daemon_runtime_dir,
    database_identity,
    database_key,
    enabled,
)


class WakeListener:
    """The master's socket: readable when a local producer named queues."""

    def __init__(self, sock: socket.socket, path: str) -> None:
        self.sock = sock
        self.path = path
        self.pid = os.getpid()
        self.inode = os.stat(path).st_ino

    @classmethod
    def bind(cls, identity: str) -> WakeListener:
        """Bind `<runtime dir>/<key>/<pid>.sock`; OSError when that cannot be done safely."""
        base, private = daemon_runtime_dir()
        _make_dir(base, private)
        directory = os.path.join(base, database_key(identity))
        _make_dir(directory, private)
        sweep_stale(directory)
        path = os.path.join(directory, f"{os.getpid()}{SOCKET_SUFFIX}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # our pid: a socket of a dead master that had it
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.bind(path)
        except BaseException:
            sock.close()
            raise
        try:
            # Any local user may send (www-data producers): see the module's security note.
            os.chmod(path, 0o666)  # noqa: S103
            return cls(sock, path)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise

    def fileno(self) -> int:
        return self.sock.fileno()

    def drain(self) -> set[str]:
        """Queue names received since the last drain (capped; garbage is dropped)."""
        names: set[str] = set()
        for _ in range(MAX_DATAGRAMS_PER_DRAIN):
            try:
                data = self.sock.recv(MAX_DATAGRAM)
            except OSError:  # BlockingIOError: nothing more; anything else: nothing to do
                break
            for raw in data.split(b"\n"):
                if len(names) >= MAX_NAMES_PER_DRAIN:
                    break
                if 0 < len(raw) <= MAX_NAME_BYTES:
                    with contextlib.suppress(UnicodeDecodeError):
                        names.add(raw.decode("utf-8"))
        return names

    def close(self) -> None:
        """Close; unlink the socket only from the process that bound it, if still ours.

        A forked child must not call this (it closes the inherited fd only): the pid
        check makes a stray call harmless anyway.
        """
        if self.sock.fileno() < 0:
            return
        if os.getpid() == self.pid:
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == self.inode:
                    os.unlink(self.path)
        self.sock.close()


def listen(url: DatabaseURL, log: Any) -> WakeListener | None:
    """The master's listener, or None (turned off, or binding failed: the poll remains)."""
    if not enabled():
        log.info(events.WAKE_SOCKET_OFF, reason=f"{ENV_WAKE}=0")
        return None
    try:
        listener = WakeListener.bind(database_identity(url))
    except (OSError, ValueError) as exc:
        log.warning(
            events.WAKE_SOCKET_UNAVAILABLE,
            error=str(exc),
            note="jobs enqueued on this host are found by the poll",
        )
        return None
    log.info(events.WAKE_SOCKET_BOUND, path=listener.path)
    return listener


def sweep_stale(directory: str) -> None:
    """Unlink sockets in `directory` that no process is bound to (masters killed -9)."""
    try:
        names = [n for n in os.listdir(directory) if n.endswith(SOCKET_SUFFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            with contextlib.suppress(OSError):
                os.unlink(path)
        except OSError:
            pass
        finally:
            probe.close()


def _make_dir(path: str, private: bool) -> None:
    """Create `path` (0755); refuse a symlink, or a per-user dir someone else controls."""
    try:
        os.mkdir(path, 0o755)
        # mkdir's mode went through the umask; producers of other users need o+x.
        os.chmod(path, 0o755)  # noqa: S103
    except FileExistsError:
        pass  # an existing directory keeps the mode its owner gave it
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{path} is not a directory")
    if private and (info.st_uid != os.getuid() or info.st_mode & 0o022):
        raise OSError(f"{path} is not owned by this user alone: not used")
