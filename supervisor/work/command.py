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
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Any

from supervisor import events, logs, registry
from supervisor.errors import ConfigError, DatabaseError, Fail, JobTimeout
from supervisor.work.exits import PROGRESS_PREFIX, CommandFailed, error_text, judge
from supervisor.work.pipes import Pipes

if TYPE_CHECKING:
    from supervisor.config import CommandConfig, Config

COMMAND_KILL_GRACE = 1.0  # seconds from SIGTERM to SIGKILL of a timed-out program's tree
KILL_WAIT = 5.0  # seconds to wait for a SIGKILLed program (one in D state)
ENV_FROM_DAEMON = ("PATH", "LANG", "LC_ALL")


def load_handlers(config: Config, *, reload: bool = False) -> list[str]:
    """Every handler of the config: its modules' functions and its commands (run here).

    What `forkq run` (at boot and on HUP), `work`, `enqueue`, `check` and the dashboard
    call; the loaded modules' names.
    """
    return registry.load(config, CommandHandler, reload=reload)


def load_producer_handlers(config: Config) -> None:
    """The handlers `forkq enqueue` and the dashboard route by (a handler's registered queue).

    A config file's modules must import: the daemon needs them too. Without a file, the
    built-in default module (`handlers`) may be absent on a producer's machine; a handler
    then goes to "default", as Queue.enqueue does where its module is not imported.
    """
    try:
        load_handlers(config)
    except ConfigError as exc:
        absent = exc.__cause__
        if config.from_file or not isinstance(absent, ModuleNotFoundError):
            raise
        if absent.name not in config.supervisor.handlers:
            raise  # the default module is there, and what it imports is not


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

    def __call__(self, payload: Any, job: Any) -> Any:
        """Run the program; what its last stdout line `forkq-result: JSON` says (None
        without one), kept when the command says `keep_result`."""
        log = logs.get(job_id=job.id, handler=job.handler)
        data = json.dumps(payload, separators=(",", ":")).encode("ascii")
        proc = spawn(self.config.argv, self.environment(job))
        pipes: Pipes | None = None
        result = ResultLine()
        try:
            pipes = Pipes(
                proc,
                data,
                log,
                on_stderr_line=lambda line: progress_line(job, line),
                on_stdout_line=result.see,
                on_tick=lambda: progress_tick(job),
            )
            try:
                pipes.pump()
            except BaseException as exc:  # the soft timeout, mostly: nothing of it outlives it
                kill_tree(proc, log, type(exc).__name__)
                pipes.drain()  # read while they are open: what its SIGTERM trap said is kept
                raise
            finally:
                pipes.close()
        except BaseException as exc:
            if pipes is None:  # it never got its pipes read
                kill_tree(proc, log, type(exc).__name__)
            if isinstance(exc, JobTimeout) and pipes is not None and pipes.stderr:
                # SPEC: the stderr tail goes into last_error also when killed for its timeout.
                raise JobTimeout(error_text(bytes(pipes.stderr), pipes.cut)) from exc
            raise
        judge(proc.wait(), bytes(pipes.stderr), pipes.cut, log)
        return result.value()


RESULT_PREFIX = "forkq-result:"


class ResultLine:
    """The program's result: its last non-empty stdout line, when that is `forkq-result:
    JSON`. A result line that is no JSON fails the job for good (Fail)."""

    def __init__(self) -> None:
        self.text: str | None = None

    def see(self, line: str) -> None:
        if line.startswith(RESULT_PREFIX):
            self.text = line[len(RESULT_PREFIX) :].strip()
        elif line.strip():
            self.text = None

    def value(self) -> Any:
        if self.text is None:
            return None
        try:
            return json.loads(self.text)
        except ValueError as exc:
            raise Fail(f"its {RESULT_PREFIX} line is not JSON: {exc}") from exc


def progress_line(job: Any, line: str) -> None:
    """`forkq-progress: PERCENT [MESSAGE]` on stderr: job.progress(PERCENT, MESSAGE)."""
    if not line.startswith(PROGRESS_PREFIX):
        return
    percent, _, message = line[len(PROGRESS_PREFIX) :].strip().partition(" ")
    try:
        value = min(100.0, max(0.0, float(percent.rstrip("%"))))
    except ValueError:  # not a number: an ordinary line, logged as such
        return
    with contextlib.suppress(DatabaseError):  # a report lost, never the program's run
        job.progress(value, message.strip())


def progress_tick(job: Any) -> float | None:
    """While the program runs: write its last report once the throttle lets it
    (JobContext.flush_progress), so a report that came too soon after the one before is
    not held back until the program exits; the seconds until then, or None."""
    flush = getattr(job, "flush_progress", None)
    if flush is None:
        return None
    try:
        wait: float | None = flush()
    except DatabaseError:  # as in progress_line: that report is lost, the program runs on
        return None
    return wait


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
    log.warning(events.COMMAND_KILLED, reason=reason, processes=len(tree), sigkilled=len(forced))


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
