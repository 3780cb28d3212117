"""Same-host wake-up: a producer's datagram tells the local daemons a queue has a job now.

Without it an idle daemon finds a new job on its next poll (`poll_interval`). A
producer on the daemon's own host can do better: right after its insert it sends one
datagram naming the queue(s) to a Unix datagram socket of every local master serving
that database, and the master wakes an idle child of that pool at once. Producers on
other hosts (and producers that turn this off) keep the poll, so the nudge is an
optimisation only: losing one never loses or delays a job beyond the poll.

Where the sockets live: `<runtime dir>/<database key>/<master pid>.sock`.

- The runtime dir is `$FORKQ_RUNTIME_DIR` if set; else `/run/forkq` (systemd's
  `RuntimeDirectory=forkq`, mode 0755) when the daemon can write it; else a per-user
  `<tempdir>/forkq-<uid>`. A producer looks in `$FORKQ_RUNTIME_DIR` alone if set,
  else in both `/run/forkq` and its own per-user dir. So a producer running as another
  user (www-data) reaches the daemon through `/run/forkq` (or a shared
  `FORKQ_RUNTIME_DIR`); the per-user fallback only joins a daemon and producers of the
  same user. A per-user dir must be owned by that user and not writable by others,
  or it is not used (someone else could have made it first in a shared /tmp).
- The database key is a short hash of the database's identity, never of a password or
  user: the absolute path of a SQLite file, or `host:port/database` for MySQL. Every
  local connection (loopback address or unix socket) to database D is taken as the
  same server, whatever its port: the app and the daemon often reach one server by
  different routes, and a false match only costs an idle child one empty claim.
- Several masters on one host for one database each bind their own socket in the same
  directory; a producer sends to every socket there. A socket left by a dead master
  refuses datagrams (ECONNREFUSED): producers skip it, the next master to start in
  that directory unlinks it.

Security: the sockets are mode 0666, so any local user can send to them. What a
sender can do is make the master wake an idle child sooner, which then runs one claim
query and goes idle again if nothing is due. Names are only compared with the
configured pool names, never used otherwise; datagram size, datagrams per drain and
names per drain are capped, so a hostile flood costs the master bounded work per loop
turn and can at worst fill the socket's queue, which makes legitimate nudges fall
back to the poll.

Turning it off (e.g. to measure the other-host path): `Queue(url, wake=False)`, or
`FORKQ_WAKE=0` in the producer's environment when the Queue is made (no datagram) or in
the daemon's (no socket).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import stat
import tempfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from supervisor.dburl import DatabaseURL
from supervisor.models import NewJob

ENV_RUNTIME_DIR = "FORKQ_RUNTIME_DIR"
ENV_WAKE = "FORKQ_WAKE"
SYSTEM_RUNTIME_DIR = "/run/forkq"
SOCKET_SUFFIX = ".sock"

MAX_DATAGRAM = 4096  # bytes read per datagram; the kernel drops the rest of a longer one
MAX_DATAGRAMS_PER_DRAIN = 64  # the rest wait for the next loop turn (select says readable)
MAX_NAMES_PER_DRAIN = 256
MAX_NAME_BYTES = 256  # a queue name has at most 64 characters, 4 bytes each in UTF-8
MAX_SOCKETS = 16  # masters per database per host a producer sends to
RELIST_AFTER = 1.0  # seconds a producer reuses its list of sockets before listing again


def enabled() -> bool:
    """False when `FORKQ_WAKE` is 0/false/no/off: no datagram sent, no socket bound."""
    return os.environ.get(ENV_WAKE, "1").strip().lower() not in ("0", "false", "no", "off")


# --- where the sockets live ----------------------------------------------------------------


def database_identity(url: DatabaseURL) -> str:
    """What names one database on this host: no user, no password."""
    if url.backend == "sqlite":
        return "sqlite:" + os.path.realpath(url.path)
    if url.is_local():
        return f"mysql:local/{url.database}"
    return f"mysql:{url.host.lower()}:{url.port}/{url.database}"


def store_identity(store: object) -> str | None:
    """The identity of a store's database, or None when it cannot be told (never raises)."""
    try:
        url = getattr(store, "url", None)
        return database_identity(url) if isinstance(url, DatabaseURL) else None
    except Exception:
        return None


def database_key(identity: str) -> str:
    """The directory name for a database: a short hash, so no path or name leaks into it."""
    return hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def user_runtime_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"forkq-{os.getuid()}")


def daemon_runtime_dir() -> tuple[str, bool]:
    """Where this process would bind, and whether that is the per-user fallback."""
    override = os.environ.get(ENV_RUNTIME_DIR, "")
    if override:
        return override, False
    if os.path.isdir(SYSTEM_RUNTIME_DIR) and os.access(SYSTEM_RUNTIME_DIR, os.W_OK | os.X_OK):
        return SYSTEM_RUNTIME_DIR, False
    return user_runtime_dir(), True


def producer_dirs(identity: str, override: str) -> tuple[tuple[str, bool], ...]:
    """The socket directories a producer looks in, each with "must be owned by me"."""
    key = database_key(identity)
    if override:
        return ((os.path.join(override, key), False),)
    return (
        (os.path.join(SYSTEM_RUNTIME_DIR, key), False),
        (os.path.join(user_runtime_dir(), key), True),
    )


# --- the master's side ---------------------------------------------------------------------


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
        log.info("wake_socket_off", reason=f"{ENV_WAKE}=0")
        return None
    try:
        listener = WakeListener.bind(database_identity(url))
    except (OSError, ValueError) as exc:
        log.warning(
            "wake_socket_unavailable",
            error=str(exc),
            note="jobs enqueued on this host are found by the poll",
        )
        return None
    log.info("wake_socket_bound", path=listener.path)
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


# --- the producer's side -------------------------------------------------------------------


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
