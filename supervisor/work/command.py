"""Command handlers: a `[commands."NAME"]` table runs a program per job, in any language.

What the program gets (SPEC "Handlers in any language"; README "Running PHP jobs as
command handlers"):

- stdin: the payload, JSON (compact, ASCII), then end of file;
- its environment: only the table's `env`, the daemon's `PATH` and `LANG` (`LC_ALL`
  when set), the daemon's variables the table names in `pass_env` (when set; never a
  FORKQ_* one) and FORKQ_JOB_ID, FORKQ_QUEUE, FORKQ_HANDLER, FORKQ_ATTEMPT. Nothing
  else of the daemon's environment (its database URL, SMTP password, web token);
- its exit status decides: 0 done; 65 (EX_DATAERR) dead at once; 75 (EX_TEMPFAIL) a
  retry the program asked for, after the delay on its last stderr line
  `forkq-retry-after: SECONDS` (a duration such as 30, "90s", "5m"; else the backoff),
  or a snooze (Snooze: again after the delay, no attempt used) with a last line
  `forkq-snooze: SECONDS`; any other status, or a signal, a failed attempt retried
  with backoff;
- the end of its stderr goes into the job's last_error; each line of stdout and stderr
  is a `command_output` event in the daemon's log (up to MAX_LOGGED_LINES per stream
  and job, each cut at MAX_LINE_CHARS).

The pool child runs the program and waits for it, reading stdout and stderr and
writing stdin with poll(2) in one loop (never a blocking call on a pipe the program
could leave full or unread), so recycling, overtime and the scoreboard work as for a
Python handler.

Process groups: the program stays in the pool child's process group, on purpose.
The master signals that group (`kill_group(child pid)`) for an overtime kill, a
cancel and the SIGKILL at shutdown, so those reach the program and whatever it
started in its group with nothing to forward and no window in which they miss.
A retire SIGTERM (HUP, a pool shrinking, a graceful stop) goes to the child's pid
alone: the program finishes its job, as a Python handler does. In a session of its
own the program would need the child to forward a SIGTERM, and the child cannot tell
the master's group kill from a retire, which is the same signal. The child's soft
timeout kills the program's whole tree (SIGTERM, then SIGKILL after
COMMAND_KILL_GRACE, well inside the master's KILL_GRACE), found from the program down
by its parent links, so processes that moved to a group or session of their own die
too; orphans already re-parented to the child (a subreaper) are swept when the job
ends (descendants.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from supervisor import logs, registry
from supervisor.durations import parse_duration
from supervisor.errors import Fail, Retry, Snooze
from supervisor.work.snooze import snooze_request

if TYPE_CHECKING:
    from supervisor.config import CommandConfig, Config

EX_DATAERR = 65  # sysexits.h: the input was bad; no retry can help
EX_TEMPFAIL = 75  # sysexits.h: try again later
STDERR_TAIL = 4096  # bytes of stderr kept for last_error
ERROR_CHARS = 3800  # of them, what fits last_error (4,000 characters) with its prefix
MAX_LOGGED_LINES = 1000  # per stream and job; the rest are counted, not logged
MAX_LINE_CHARS = 2000  # a longer line is logged cut, with truncated=true
READ_CHUNK = 65536
DRAIN_LIMIT = 1 << 20  # bytes read after the program exits (a grandchild may go on writing)
COMMAND_KILL_GRACE = 1.0  # seconds from SIGTERM to SIGKILL of a timed-out program's tree
KILL_WAIT = 5.0  # seconds to wait for a SIGKILLed program (one in D state)
NO_PIDFD_POLL = 50  # milliseconds between exit checks where pidfd_open is missing
MAX_RETRY_AFTER = 365 * 86400.0  # seconds a program may ask to wait, at most
RETRY_AFTER = re.compile(r"^forkq-retry-after:\s*(.*?)\s*$")
ENV_FROM_DAEMON = ("PATH", "LANG", "LC_ALL")


class CommandFailed(Exception):
    """the command failed."""


def load_handlers(config: Config, *, reload: bool = False) -> list[str]:
    """Every handler of the config: its modules' functions and its commands (run here).

    What `forkq run` (at boot and on HUP), `work`, `enqueue`, `check` and the dashboard
    call; the loaded modules' names.
    """
    return registry.load(config, CommandHandler, reload=reload)


class CommandHandler:
    """The registered function of one `[commands."NAME"]` table: `(payload, job) -> None`.

    Returns when the program exits 0; raises Fail (65), Retry or Snooze (75) or
    CommandFailed (anything else) for the worker to map like a Python handler's exceptions. The
    worker's soft timeout (JobTimeout) interrupts the wait; the program's tree is then
    killed before the exception goes on.
    """

    def __init__(self, config: CommandConfig) -> None:
        self.config = config
        names = (*ENV_FROM_DAEMON, *config.pass_env)
        base = {key: os.environ[key] for key in names if key in os.environ}
        base.setdefault("PATH", os.defpath)
        self.base_env = {**base, **config.env}

    def environment(self, job: Any) -> dict[str, str]:
        return {
            **self.base_env,
            "FORKQ_JOB_ID": str(job.id),
            "FORKQ_QUEUE": str(job.queue),
            "FORKQ_HANDLER": str(job.handler),
            "FORKQ_ATTEMPT": str(job.attempts),
        }

    def __call__(self, payload: Any, job: Any) -> None:
        log = logs.get(job_id=job.id, handler=job.handler)
        data = json.dumps(payload, separators=(",", ":")).encode("ascii")
        proc = spawn(self.config.argv, self.environment(job))
        try:
            pipes = Pipes(proc, data, log)
            try:
                pipes.pump()
            finally:
                pipes.close()
        except BaseException as exc:  # the soft timeout, mostly: nothing of it outlives the attempt
            kill_tree(proc, log, type(exc).__name__)
            raise
        judge(proc.wait(), bytes(pipes.stderr), pipes.cut, log)


def spawn(argv: tuple[str, ...], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the program with three pipes, in our process group (see the module's doc).

    A pool child ignores SIGINT, and an ignored signal stays ignored across exec: it is
    put back to the default for the fork, so the program starts as any program does.
    """
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
    except OSError as exc:  # removed or made unexecutable since the config was loaded
        raise CommandFailed(f"could not start {argv[0]!r}: {exc.strerror or exc}") from None
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


@dataclass
class Stream:
    """One output pipe of the program: its lines to the log, up to the caps."""

    name: str  # "stdout" or "stderr"
    log: Any
    partial: bytes = b""
    logged: int = 0
    dropped: int = 0
    skipping: bool = False  # inside a line already logged cut: the rest is not logged

    def feed(self, data: bytes) -> None:
        if self.logged >= MAX_LOGGED_LINES:
            self.dropped += data.count(b"\n")
            self.partial = data[-1:].strip(b"\n")  # only marks an unterminated last line
            return
        lines = data.split(b"\n")
        lines[0] = self.partial + lines[0]
        self.partial = lines.pop()
        for number, line in enumerate(lines):
            if self.skipping:
                self.skipping = False
                continue
            if self.logged >= MAX_LOGGED_LINES:
                self.dropped += len(lines) - number
                self.partial = b""
                return
            self.emit(line)
        if len(self.partial) > MAX_LINE_CHARS * 4:  # no line end in sight: log its start
            if not self.skipping:
                self.emit(self.partial)
            self.skipping, self.partial = True, b""

    def emit(self, raw: bytes) -> None:
        line = raw.decode("utf-8", "replace").rstrip("\r")
        cut = len(line) > MAX_LINE_CHARS or len(raw) > MAX_LINE_CHARS * 4
        extra = {"truncated": True} if cut else {}
        self.log.info("command_output", stream=self.name, line=line[:MAX_LINE_CHARS], **extra)
        self.logged += 1

    def end(self) -> None:
        if self.partial and not self.skipping:
            if self.logged < MAX_LOGGED_LINES:
                self.emit(self.partial)
            else:
                self.dropped += 1
        self.partial = b""
        if self.dropped:
            self.log.warning(
                "command_output_capped", stream=self.name, lines_not_logged=self.dropped
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

    def __post_init__(self) -> None:
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self.stdin = self.proc.stdin.fileno()
        self.outputs = {
            self.proc.stdout.fileno(): Stream("stdout", self.log),
            self.proc.stderr.fileno(): Stream("stderr", self.log),
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
        timeout = None if self.pidfd is not None else NO_PIDFD_POLL
        exited = False
        while not exited:
            for fd, _ in poller.poll(timeout):
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


def judge(status: int, stderr: bytes, cut: bool, log: Any) -> None:
    """The exit status as the worker understands a handler: return, Fail, Retry, raise."""
    if status == 0:
        return
    text = error_text(stderr, cut)
    if status == EX_DATAERR:
        raise Fail(_with_text("exit 65 (EX_DATAERR)", text))
    if status == EX_TEMPFAIL:
        snooze = snooze_request(text)
        if snooze is not None:  # work/snooze.py reads its line
            raise Snooze(snooze[0], _with_text("exit 75 (EX_TEMPFAIL)", snooze[1]))
        delay, text = retry_after(text, log)
        raise Retry(delay, _with_text("exit 75 (EX_TEMPFAIL)", text))
    raise CommandFailed(_with_text(describe_status(status), text))


def describe_status(status: int) -> str:
    if status >= 0:
        return f"exit {status}"
    try:
        return f"killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"killed by signal {-status}"


def error_text(tail: bytes, cut: bool) -> str:
    """The stderr tail as text: a UTF-8 sequence split by the cut is dropped, not garbled."""
    if cut:
        start = 0
        while start < min(4, len(tail)) and 0x80 <= tail[start] < 0xC0:
            start += 1
        tail = tail[start:]
    text = tail.decode("utf-8", "replace").rstrip()
    if cut or len(text) > ERROR_CHARS:
        text = "..." + text[-ERROR_CHARS:]
    return text


def retry_after(text: str, log: Any) -> tuple[float | None, str]:
    """(delay, text without it) from a last stderr line `forkq-retry-after: DURATION`;
    (None, text) when there is none. One that names no duration is said in the log, as
    is a `forkq-snooze:` line snooze_request refused."""
    head, _, last = text.rpartition("\n")
    if last.startswith("forkq-snooze:"):
        reason = "not a duration of at most a year"
        log.warning("command_snooze_ignored", line=last[:200], reason=reason)
        return None, text
    match = RETRY_AFTER.match(last)
    if not match:
        return None, text
    try:
        delay = parse_duration(match.group(1))
        if delay > MAX_RETRY_AFTER:
            raise ValueError(f"more than {MAX_RETRY_AFTER:g} seconds")
    except ValueError as exc:
        log.warning("command_retry_after_ignored", line=last[:200], reason=str(exc))
        return None, text
    return delay, head.rstrip()


def _with_text(what: str, text: str) -> str:
    return f"{what}: {text}" if text else f"{what} (nothing on stderr)"


def kill_tree(proc: subprocess.Popen[bytes], log: Any, reason: str) -> None:
    """SIGTERM the program and every process below it, SIGKILL what is left after
    COMMAND_KILL_GRACE, and reap the program. Found by parent links (psutil), so a
    descendant in a group or session of its own is found too.
    """
    import psutil  # only when a program has to be killed: never on a job's normal path

    try:
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        tree = []
    for member in tree:
        _send(member, signal.SIGTERM)
        _send(member, signal.SIGCONT)  # a stopped process gets to act on its SIGTERM
    deadline = time.monotonic() + COMMAND_KILL_GRACE
    while time.monotonic() < deadline and (proc.poll() is None or any(map(_alive, tree[1:]))):
        time.sleep(0.01)
    forced = [member for member in tree if _alive(member)]
    for member in forced:
        _send(member, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_WAIT)
    deadline = time.monotonic() + KILL_WAIT  # SIGKILL is not death yet: until they are gone
    while time.monotonic() < deadline and any(map(_alive, forced)):
        time.sleep(0.01)
    log.warning("command_killed", reason=reason, processes=len(tree), sigkilled=len(forced))


def _alive(proc: Any) -> bool:
    import psutil

    try:
        return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _send(proc: Any, sig: int) -> None:
    import psutil

    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)
