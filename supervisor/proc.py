"""Process helpers: names, titles, parent-death signal, group kills, reaping, and the one
fork of every process the master makes (the pool's children, the check tick, the metrics
server) with its outermost frame."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import gc
import os
import secrets
import signal
import socket
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import NoReturn

import setproctitle

from supervisor.escaping import for_terminal

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


BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
PID_NAMESPACE_PATH = "/proc/self/ns/pid"


def hostname() -> str:
    return socket.gethostname()


@functools.cache
def node_id() -> str:
    """Which kernel boot and pid namespace this process lives in (at most 64 characters).

    A pid means something only there, and a hostname does not say where that is: two
    servers, VMs or containers may share a name. On Linux the node is the kernel's boot
    id (new at every boot, distinct per machine) and the pid namespace's inode (distinct
    per container on one kernel; reused only once every process of the old one is gone):
    `5c1d...-2d3c:4026531836`. Elsewhere it is the boot time, `boot-1700000000`. Processes
    on one node see each other's pids, so a master may judge a row of its own node by
    its pid; a row of any other node only by its heartbeat. The same in a forked child.
    """
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as file:
            boot = file.read().strip()
    except (OSError, ValueError):
        boot = ""
    if not boot:
        import psutil  # only off Linux; never loaded on the master's way to its first fork

        return f"boot-{round(psutil.boot_time())}"
    try:
        return f"{boot}:{os.stat(PID_NAMESPACE_PATH).st_ino}"[:64]
    except OSError:
        return boot[:64]


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


def set_escaped_title(title: str) -> None:
    """set_title for a title made only of parts already escaped (for_terminal)."""
    setproctitle.setproctitle(title)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send `sig` when the parent (the master) dies; a no-op elsewhere."""
    prctl(PR_SET_PDEATHSIG, sig)


def prctl(option: int, value: int) -> bool:
    """Linux prctl(2) with one argument; False where it failed or there is none.

    prctl is looked up among the symbols already loaded (libc is): `ctypes.util.find_library`
    runs `ldconfig` as a subprocess, which cost every new child 2 ms and more.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # no prctl: not Linux
        return False


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


def freeze_heap() -> None:
    """Everything this process holds now is skipped by its collector from then on. A
    collection writes to every object it walks: in a forked process, a copy of each page
    it still shares with its parent or children (and the exit walked them all again). A new
    child does it first (what it inherited), the master once at boot, before its first fork.
    Never thawed: a thaw would also thaw what a parent froze, and age young objects."""
    gc.freeze()


def fork_process(
    body: Callable[[], int], close_fds: Sequence[int], crashed: Callable[[str], None]
) -> int:
    """Fork a process of the master's; its pid. The child runs `body` in `process_frame`
    and never returns here. The master's signals are blocked across the fork (one that
    arrives in between waits for the child's own defaults), and the master's mask is
    restored on both sides, whatever happens."""
    sys.stdout.flush()  # else the child would write the master's buffered lines again
    sys.stderr.flush()
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, MASTER_SIGNALS)
    try:
        pid = os.fork()
        if pid == 0:
            freeze_heap()  # what it inherited: never walked, never copied page by page
            process_frame(body, close_fds, old_mask, crashed)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    return pid


def process_frame(
    body: Callable[[], int],
    close_fds: Sequence[int],
    mask: set[int | signal.Signals],
    crashed: Callable[[str], None],
) -> NoReturn:
    """A forked process's outermost frame: never returns, never unwinds into master code.

    Signals back to their defaults (the master's handlers only queue), the master's mask
    restored, the master's descriptors closed, then `body`: its return value, or a
    SystemExit's code, is the exit code; an exception is told to `crashed` (its
    traceback) and exits 1. `os._exit` in a finally, whatever happens."""
    code = 1
    try:
        for sig in MASTER_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in close_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        code = body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        try:
            crashed(traceback.format_exc(limit=5))
        except BaseException:
            with contextlib.suppress(BaseException):
                traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
