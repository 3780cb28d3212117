"""A command's three pipes, watched with poll(2) until the program exits.

The pool child writes the payload to stdin and reads stdout and stderr in one loop,
never a blocking call on a pipe the program could leave full or unread (work/command.py
says why). Each line of output is a `command_output` event, up to the caps below; the
tail of stderr is kept for last_error (work/exits.py reads it).
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from supervisor import events, masking

STDERR_TAIL = 4096  # bytes of stderr kept for last_error
MAX_LOGGED_LINES = 1000  # per stream and job; the rest are counted, not logged
MAX_LINE_CHARS = 2000  # a longer line is logged cut, with truncated=true
READ_CHUNK = 65536
DRAIN_LIMIT = 1 << 20  # bytes read after the program exits (a grandchild may go on writing)
NO_PIDFD_POLL = 50  # milliseconds between exit checks where pidfd_open is missing


@dataclass
class Stream:
    """One output pipe of the program: its lines to the log, up to the caps."""

    name: str  # "stdout" or "stderr"
    log: Any
    partial: bytes = b""
    logged: int = 0
    dropped: int = 0
    skipping: bool = False  # inside a line already logged cut: the rest is not logged
    on_line: Callable[[str], None] | None = None  # sees every whole line (forkq-progress:)

    def feed(self, data: bytes) -> None:
        lines = data.split(b"\n")
        lines[0] = self.partial + lines[0]
        self.partial = lines.pop()
        for line in lines:
            if self.skipping:
                self.skipping = False
                continue
            self.emit(line)
        if len(self.partial) > MAX_LINE_CHARS * 4:  # no line end in sight: log its start
            if not self.skipping:
                self.emit(self.partial)
            self.skipping, self.partial = True, b""

    def emit(self, raw: bytes) -> None:
        """One whole line: to on_line always (a program's last forkq-progress: line may come
        after the cap), to the log while under MAX_LOGGED_LINES."""
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if self.on_line is not None:  # the protocol lines (forkq-result: ...) as written
            self.on_line(line)
        if self.logged >= MAX_LOGGED_LINES:
            self.dropped += 1
            return
        line = masking.masked(line)  # the log's copy (masking.py)
        cut = len(line) > MAX_LINE_CHARS or len(raw) > MAX_LINE_CHARS * 4
        extra = {"truncated": True} if cut else {}
        self.log.info(events.COMMAND_OUTPUT, stream=self.name, line=line[:MAX_LINE_CHARS], **extra)
        self.logged += 1

    def end(self) -> None:
        if self.partial and not self.skipping:
            self.emit(self.partial)
        self.partial = b""
        if self.dropped:
            self.log.warning(
                events.COMMAND_OUTPUT_CAPPED, stream=self.name, lines_not_logged=self.dropped
            )
            self.dropped = 0


@dataclass
class Pipes:
    """The program's three pipes and its exit, watched with poll(2) until it exits."""

    proc: subprocess.Popen[bytes]
    data: bytes
    log: Any
    stderr: bytearray = field(default_factory=bytearray)  # its tail, STDERR_TAIL bytes
    cut: bool = False  # stderr was longer than its tail
    written: int = 0
    on_stderr_line: Callable[[str], None] | None = None
    on_stdout_line: Callable[[str], None] | None = None  # sees `forkq-result:` lines
    # Called on each turn of the loop while the program runs: seconds until it wants to be
    # called again (a held-back progress report falls due), None for no wish.
    on_tick: Callable[[], float | None] | None = None

    def __post_init__(self) -> None:
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self.stdin = self.proc.stdin.fileno()
        self.outputs = {
            self.proc.stdout.fileno(): Stream("stdout", self.log, on_line=self.on_stdout_line),
            self.proc.stderr.fileno(): Stream("stderr", self.log, on_line=self.on_stderr_line),
        }
        for fd in (self.stdin, *self.outputs):
            os.set_blocking(fd, False)
        self.stderr_fd = self.proc.stderr.fileno()
        self.pidfd = _pidfd(self.proc.pid)
        self.open = set(self.outputs)
        self.stdin_open = True
        self.closed = False

    def pump(self) -> None:
        """Until the program exits: write stdin, read and log stdout and stderr."""
        poller = select.poll()
        self.write()  # most payloads fit the pipe at once: no poll round for them
        if self.stdin_open:
            poller.register(self.stdin, select.POLLOUT)
        for fd in self.outputs:
            poller.register(fd, select.POLLIN)
        if self.pidfd is not None:
            poller.register(self.pidfd, select.POLLIN)
        exited = False
        while not exited:
            for fd, _ in poller.poll(self.poll_timeout()):
                if fd == self.pidfd:
                    exited = True
                elif fd == self.stdin:
                    self.write()
                    if not self.stdin_open:
                        poller.unregister(fd)
                elif self.read(fd) == 0:
                    self.open.discard(fd)
                    poller.unregister(fd)
            exited = exited or (self.pidfd is None and self.proc.poll() is not None)
        self.drain()

    def poll_timeout(self) -> int | None:
        """Milliseconds poll(2) may wait: for ever with a pidfd, else NO_PIDFD_POLL; less
        when on_tick wants a turn sooner (it is called here, on every turn)."""
        timeout = None if self.pidfd is not None else NO_PIDFD_POLL
        wish = self.on_tick() if self.on_tick is not None else None
        if wish is None:
            return timeout
        wait = max(1, math.ceil(wish * 1000))
        return wait if timeout is None else min(wait, timeout)

    def write(self) -> None:
        """As much of the payload as the pipe takes now; EOF once all of it is in."""
        try:
            while self.written < len(self.data):
                chunk = self.data[self.written : self.written + READ_CHUNK]
                self.written += os.write(self.stdin, chunk)
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the program does not read its stdin, which is its right
            pass
        self.close_stdin()

    def close_stdin(self) -> None:
        if self.stdin_open:
            self.stdin_open = False
            assert self.proc.stdin
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def read(self, fd: int) -> int:
        """One chunk from an output pipe: bytes read, 0 at end of file, -1 if none now."""
        try:
            data = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return -1
        except OSError:
            return 0
        if not data:
            return 0
        if fd == self.stderr_fd:
            self.stderr += data
            if len(self.stderr) > STDERR_TAIL:
                del self.stderr[:-STDERR_TAIL]
                self.cut = True
        self.outputs[fd].feed(data)
        return len(data)

    def drain(self) -> None:
        """What the program wrote before it exited, not what a leftover goes on writing."""
        budget = DRAIN_LIMIT
        for fd in sorted(self.open):
            while budget > 0:
                got = self.read(fd)
                if got <= 0:
                    break
                budget -= got

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_stdin()
        for stream in self.outputs.values():
            stream.end()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if self.pidfd is not None:
            os.close(self.pidfd)


def _pidfd(pid: int) -> int | None:
    """A descriptor that turns readable when `pid` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
