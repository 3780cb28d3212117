"""sd_notify without libsystemd: a few datagrams to `$NOTIFY_SOCKET`.

The protocol is newline-separated `KEY=VALUE` fields in one datagram on an AF_UNIX
SOCK_DGRAM socket whose address systemd puts in `$NOTIFY_SOCKET` (a filesystem path,
or an abstract socket spelled with a leading '@'). Talking it directly saves a C
dependency and keeps the master free of threads.

Nothing here raises and nothing here logs: a missing or broken notify socket must
never take the daemon down (outside systemd there simply is none), and the master
decides what is worth a log line from the boolean each function returns.

The socket is opened lazily and remembered together with the pid that opened it. A
forked child therefore never reuses the master's socket object; it opens its own the
first time it notifies. (With `NotifyAccess=main` systemd ignores children anyway,
but a stale object shared across fork is a hazard not worth keeping.)
"""

from __future__ import annotations

import contextlib
import os
import socket
import time

_SEND_TIMEOUT = 1.0  # seconds; the master loop must never hang on a full notify queue

_sock: socket.socket | None = None
_sock_pid = 0


def _address() -> str | None:
    """The socket address from the environment, in the form `socket.sendto` takes.

    Abstract sockets ('@name') become '\\0name'. Anything that is neither absolute
    path nor abstract (e.g. systemd 254's `vsock:` addresses) is not supported, so we
    behave as if not under systemd rather than guess.
    """
    value = os.environ.get("NOTIFY_SOCKET", "")
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def _socket() -> socket.socket:
    """The per-process socket, re-created after a fork (see the module docstring)."""
    global _sock, _sock_pid
    pid = os.getpid()
    if _sock is None or _sock_pid != pid:
        _close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        sock.settimeout(_SEND_TIMEOUT)
        _sock, _sock_pid = sock, pid
    return _sock


def _close() -> None:
    """Drop the socket. Closing an inherited copy only closes this process's descriptor."""
    global _sock
    sock, _sock = _sock, None
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.close()


def notify(*fields: str) -> bool:
    """Send `fields` (each `KEY=VALUE`) as one datagram; True if it was handed to systemd.

    False, without raising, when not under systemd (no `$NOTIFY_SOCKET`), when the
    address form is unsupported, or when the send fails (socket gone, queue full
    past the timeout). The caller may log that; this module never does.
    """
    address = _address()
    if address is None or not fields:
        return False
    message = "\n".join(map(str, fields)).encode("utf-8", "replace")
    try:
        _socket().sendto(message, address)
    except (OSError, ValueError):
        _close()  # a fresh socket next time, in case this one is in a bad state
        return False
    return True


def ready() -> bool:
    """Start-up is complete (children are up): `systemctl start` returns, dependents start."""
    return notify("READY=1")


def stopping() -> bool:
    """Graceful shutdown began; systemd shows the unit as 'deactivating' meanwhile."""
    return notify("STOPPING=1")


def reloading() -> bool:
    """A reload (SIGHUP) began; send `ready()` again once it is done.

    systemd 253+ (`Type=notify-reload`) wants MONOTONIC_USEC alongside RELOADING=1 to
    tell this reload from an older one; CLOCK_MONOTONIC is the clock it compares with.
    Older versions ignore the extra field.
    """
    now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify("RELOADING=1", f"MONOTONIC_USEC={now_usec}")


def status(text: str) -> bool:
    """A one-line summary for `systemctl status`; newlines would start a new field."""
    line = " ".join(str(text).splitlines())
    return notify(f"STATUS={line}")


def watchdog() -> bool:
    """Keep-alive for `WatchdogSec=`: a master loop that stops pinging gets restarted."""
    return notify("WATCHDOG=1")


def extend_timeout(seconds: float) -> bool:
    """Ask for `seconds` more before systemd's start/stop timeout fires (systemd 236+)."""
    usec = max(0, int(seconds * 1_000_000))
    return notify(f"EXTEND_TIMEOUT_USEC={usec}")


def watchdog_interval() -> float | None:
    """How often to call `watchdog()`, in seconds: half of `WatchdogSec`, or None.

    None when no watchdog is configured, the value is not a positive integer, or
    `WATCHDOG_PID` names another process (the variables leaked into a child or a
    subprocess, which must not ping on the master's behalf). Half the interval is
    what sd_watchdog_enabled(3) recommends, so one late tick is not fatal.
    """
    usec = _positive_int(os.environ.get("WATCHDOG_USEC"))
    if usec is None:
        return None
    pid_text = os.environ.get("WATCHDOG_PID")
    if pid_text is not None and _positive_int(pid_text) != os.getpid():
        return None
    return usec / 2 / 1_000_000


def _positive_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value > 0 else None
