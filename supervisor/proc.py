"""Process helpers: names, titles, parent-death signal, group kills, reaping."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import secrets
import signal
import socket

import setproctitle

from .escaping import for_terminal

PR_SET_PDEATHSIG = 1
# What the master handles (its handlers only queue the signal); a child resets them all.
MASTER_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGHUP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGCHLD,
    signal.SIGALRM,
)


def hostname() -> str:
    return socket.gethostname()


def process_name(pid: int | None = None) -> str:
    """host:pid:token — the lease owner name; the token tells a recycled pid apart."""
    return f"{hostname()}:{pid or os.getpid()}:{secrets.token_hex(4)}"


def set_title(title: str) -> None:
    """The process title, control characters shown as escapes.

    A title carries a handler name read from a row: a NUL would make setproctitle raise
    (a crash before the unknown-handler check), and ESC or CR would reach whoever runs
    `ps` or `top` in a terminal.
    """
    setproctitle.setproctitle(for_terminal(title))


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send `sig` when the parent (the master) dies; a no-op elsewhere."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return
    try:
        libc = ctypes.CDLL(libc_name, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        return


def kill_group(pid: int, sig: int) -> bool:
    """Signal the child's process group (its handler's subprocesses too); False if gone.

    Falls back to the pid alone when the group does not exist (yet): the master sets
    the group right after fork, but a child may still be between fork and setpgid.
    """
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def reap() -> list[tuple[int, int]]:
    """(pid, wait status) of every child that has exited, without blocking."""
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            raise
        if pid == 0:
            return reaped
        reaped.append((pid, status))


def describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exit {os.waitstatus_to_exitcode(status)}"
