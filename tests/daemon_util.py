"""Run the real daemon (`python -m supervisor run -c FILE`) from a test, and clean up after it.

`Daemon` writes a TOML config and a handler module (`testhandlers.py`) into the test's
tmp_path, starts the master in a session of its own with JSON logs going to a file,
and gives the test what it needs to look at from outside: the log's events, the
children (psutil, with their process titles), signals, and a `stop()` with deadlines.

The `daemons` fixture (tests/daemon/conftest.py registers it for the daemon tests;
elsewhere import `daemons_fixture` into the test module) hands out Daemon objects and,
whatever the test did, kills every process of every daemon's session at the end (the
master's group and each child, which lives in a process group of its own). Every wait
has a deadline. A teardown that never runs (pytest killed) leaves nothing either: each
master gets `Daemon.parent_death_signal` when the process that started it dies. The
benchmarks run their daemons on this launcher too (benchmarks/harness.py's BenchDaemon,
benchmarks/scale_env.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from util import REPO_ROOT, dies_with_us, wait_until

HANDLERS_MODULE = "testhandlers"

# The handlers the daemon tests enqueue. Imported by the master before it forks, so
# module-level state (HOARD) is per process after the fork.
HANDLERS_SOURCE = '''\
"""Handlers for the daemon tests (written by tests/daemon_util.py)."""

import os
import time

from supervisor import handler

HOARD = []  # memory the grower keeps for the life of its process


@handler("t.noop")
def noop(payload, job):
    return None


@handler("t.sleep")
def sleep(payload, job):
    time.sleep(float(payload.get("seconds", 0)))


@handler("t.record")
def record(payload, job):
    """Append `id,pid,start,end` to payload["file"] in one O_APPEND write."""
    start = time.time()
    if payload.get("seconds"):
        time.sleep(float(payload["seconds"]))
    end = time.time()
    line = f"{job.id},{os.getpid()},{start:.6f},{end:.6f}\\n".encode()
    fd = os.open(payload["file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@handler("t.hang")
def hang(payload, job):
    """Ignores the soft timeout (JobTimeout is a BaseException): only a kill ends it."""
    while True:
        try:
            time.sleep(1)
        except BaseException:
            pass


@handler("t.cpu")
def cpu(payload, job):
    deadline = time.monotonic() + float(payload.get("seconds", 1))
    n = 0
    while time.monotonic() < deadline:
        n += 1


@handler("t.grow")
def grow(payload, job):
    """Allocate payload["mb"] MB (touched, so it is resident) and keep it."""
    HOARD.append(bytearray(b"x" * (int(payload["mb"]) * 1024 * 1024)))


@handler("t.fail")
def fail(payload, job):
    raise RuntimeError("fail-always handler")


@handler("t.stop_master")
def stop_master(payload, job):
    """Freeze the master (SIGSTOP; the test sends SIGCONT), then sleep: while it is frozen
    nothing is handed back, so the test can look at what this child holds."""
    import signal

    os.kill(os.getppid(), signal.SIGSTOP)
    time.sleep(float(payload.get("seconds", 30)))


@handler("t.lose_ack")
def lose_ack(payload, job):
    """Lock this job's row from a second connection, and once this child's acknowledgement
    of it has waited for that lock a while, end the child's connection from the server's
    side (a restart, a Galera node leaving): the child meets the loss inside its claim's
    transaction, with the success not written."""
    import threading

    import psutil
    import pymysql

    server = ("127.0.0.1", int(payload["port"]))
    child_ports = {
        str(c.laddr.port) for c in psutil.Process().net_connections("tcp") if c.raddr == server
    }
    locker = pymysql.connect(
        host=server[0], port=server[1], user=payload["user"], password=payload["password"],
        database=payload["database"],
    )
    with locker.cursor() as cursor:
        cursor.execute("BEGIN")
        cursor.execute("SELECT id FROM forkq_jobs WHERE id = %s FOR UPDATE", (job.id,))

    def child_waiting(cursor):
        cursor.execute("SELECT ID, HOST, COMMAND, TIME_MS FROM information_schema.PROCESSLIST")
        for ident, host, command, time_ms in cursor.fetchall():
            if host and host.rpartition(":")[2] in child_ports and command == "Query":
                if time_ms >= 300:
                    return ident
        return None

    def end_the_wait():
        try:
            with locker.cursor() as cursor:
                for _ in range(1000):
                    waiting = child_waiting(cursor)
                    if waiting is not None:
                        cursor.execute("KILL CONNECTION %s", (waiting,))
                        return
                    time.sleep(0.02)
        finally:
            locker.rollback()
            locker.close()

    threading.Thread(target=end_the_wait, daemon=True).start()
'''

# Every child dies right after the fork; the master (which forked nothing before
# importing this) is unaffected.
CRASHING_SOURCE = """\
import os

from supervisor import handler

os.register_at_fork(after_in_child=lambda: os._exit(3))


@handler("t.crash_noop")
def noop(payload, job):
    return None
"""

BROKEN_SOURCE = """\
raise ImportError("this handler module is broken on purpose")
"""

SUPERVISOR_DEFAULTS: dict[str, Any] = {
    "handlers": [HANDLERS_MODULE],
    "check_interval": 0.5,
    "heartbeat_interval": 0.5,
    "poll_interval": 0.02,
    "shutdown_timeout": 10,
}


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def render_config(db_url: str, pools: dict[str, dict[str, Any]], supervisor: dict[str, Any]) -> str:
    lines = ["[database]", f"url = {toml_value(db_url)}", "", "[supervisor]"]
    lines += [f"{key} = {toml_value(value)}" for key, value in supervisor.items()]
    for name, settings in pools.items():
        lines += ["", f"[pools.{name}]"]
        lines += [f"{key} = {toml_value(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def parse_json_lines(text: str) -> list[dict[str, Any]]:
    """The daemon's log: exactly one JSON object a line, whatever wrote it (the master and
    every child share stdout; a spliced line is a defect, so it fails the test here).

    Only a last line without its newline is skipped: the file is read while processes write.
    And one cut a fault test makes: Linux ends a SIGKILLed process's `write` to a file at
    a page boundary, so a process killed mid-line leaves the start of its line up to a
    multiple of 4 KiB of the file, and the next line written follows it. Such a fragment
    (the killed writer's last line, lost with it) is skipped; any other splice fails.
    """
    events: list[dict[str, Any]] = []
    lines = text.split("\n")
    offset = 0  # of the line in the file (the lines are ASCII JSON: characters are bytes)
    for number, line in enumerate(lines[:-1], 1):
        start, offset = offset, offset + len(line) + 1
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError as exc:
            cut = PAGE - start % PAGE  # where in this line the file's next page starts
            try:
                event = json.loads(line[cut:]) if 0 < cut < len(line) else None
            except ValueError:
                event = None
            if not isinstance(event, dict):
                raise AssertionError(
                    f"log line {number} is not one JSON object: {line[:300]!r}"
                ) from exc
        assert isinstance(event, dict), f"log line {number} is not an object: {line[:300]!r}"
        events.append(event)
    return events


PAGE = 4096  # bytes: where the kernel may end the write of a process SIGKILLed during it


def session_processes(sid: int) -> list[psutil.Process]:
    """Every live process of session `sid` (the master made it; children stay in it)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


class Daemon:
    """One `forkq run` in its own session, configured in `directory`."""

    # What the master gets when the process that started it dies (util.dies_with_us): a
    # pytest killed mid-test runs no teardown. SIGQUIT is the immediate stop: the master
    # SIGKILLs its children's groups, reaps them, kills what their jobs left behind
    # (it is their subreaper), hands their jobs back and exits, in about a second,
    # where SIGTERM's drain could wait the whole shutdown_timeout on a running job.
    parent_death_signal: int = signal.SIGQUIT

    def __init__(
        self,
        directory: Path,
        db_url: str,
        pools: dict[str, dict[str, Any]] | None = None,
        supervisor: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        name: str = "daemon",
    ) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.db_url = db_url
        self.name = name
        self.pools = pools or {"work": {"workers": 1}}
        self.supervisor = {**SUPERVISOR_DEFAULTS, **(supervisor or {})}
        self.extra_env = env or {}
        self.config_path = directory / f"{name}.toml"
        self.log_path = directory / f"{name}.log"
        self.stderr_path = directory / f"{name}.stderr"
        self.command = [sys.executable, "-m", "supervisor"]  # `forkq` (the bench's lab wraps it)
        self.proc: subprocess.Popen[bytes] | None = None
        self.sid: int | None = None
        self.seen_pids: set[int] = set()
        (directory / f"{HANDLERS_MODULE}.py").write_text(HANDLERS_SOURCE, encoding="utf-8")
        self.write_config()

    # --- configuration -------------------------------------------------------------------

    def write_config(
        self,
        pools: dict[str, dict[str, Any]] | None = None,
        supervisor: dict[str, Any] | None = None,
        text: str | None = None,
    ) -> None:
        """Write the config (or raw `text`), atomically, for the next start or HUP."""
        if pools is not None:
            self.pools = pools
        if supervisor is not None:
            self.supervisor = {**self.supervisor, **supervisor}
        if text is None:
            text = render_config(self.db_url, self.pools, self.supervisor)
        temporary = self.config_path.with_suffix(".tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, self.config_path)

    def write_module(self, module: str, source: str) -> None:
        (self.directory / f"{module}.py").write_text(source, encoding="utf-8")

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for key in (
            "FORKQ_DATABASE_URL",
            "FORKQ_CONFIG",
            "NOTIFY_SOCKET",
            "WATCHDOG_USEC",
            "WATCHDOG_PID",
            "FORKQ_LOG_FORMAT",
        ):
            env.pop(key, None)
        env["PYTHONPATH"] = os.pathsep.join([str(self.directory), str(REPO_ROOT)])
        env["PYTHONUNBUFFERED"] = "1"
        env["FORKQ_LOG_FORMAT"] = "json"
        env.update(self.extra_env)
        return env

    # --- life ----------------------------------------------------------------------------

    def start(self) -> Daemon:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        with open(self.log_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                [*self.command, "run", "-c", str(self.config_path)],
                cwd=self.directory,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=dies_with_us(self.parent_death_signal),
            )
        self.sid = self.proc.pid
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout: float = 20.0) -> Daemon:
        """Until the master runs and every pool has its `workers` children, idle."""
        expected = sum(int(p.get("workers", 2)) for p in self.pools.values())

        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"{self.name} exited early: {self.describe()}")
            # Pool children only: the check tick and the metrics server are children too.
            titles = [t for t in self.child_titles().values() if " worker " in t]
            idle = [t for t in titles if t.endswith(" idle")]
            return len(titles) == expected and len(idle) == expected

        wait_until(ready, timeout=timeout, interval=0.05, message=f"{self.name} ready")
        return self

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit within {timeout:g}s: {self.describe()}"
            ) from None

    def send_signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 20.0, sig: int = signal.SIGTERM) -> int:
        """Signal the master and wait for it to exit; its exit status."""
        if not self.alive():
            assert self.proc is not None
            return self.proc.wait(timeout=1)
        self.send_signal(sig)
        return self.wait_exit(timeout)

    def kill_all(self) -> None:
        """The finalizer: SIGKILL the master's group and every process left in its session."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        leftovers = session_processes(self.sid) if self.sid else []
        for pid in self.seen_pids | {p.pid for p in leftovers}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if pid == self.proc.pid or self._in_session(pid):
                    os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while self.sid and session_processes(self.sid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _in_session(self, pid: int) -> bool:
        try:
            return os.getsid(pid) == self.sid
        except (ProcessLookupError, PermissionError):
            return False

    # --- looking from outside ---------------------------------------------------------

    def children(self) -> list[psutil.Process]:
        """The master's live children (zombies not yet reaped left out)."""
        if not self.alive():
            return []
        try:
            kids = psutil.Process(self.pid).children()
        except psutil.Error:
            return []
        live = []
        for kid in kids:
            try:
                if kid.status() != psutil.STATUS_ZOMBIE:
                    live.append(kid)
            except psutil.Error:
                continue
        self.seen_pids.update(k.pid for k in live)
        return live

    def child_titles(self) -> dict[int, str]:
        """pid -> process title (setproctitle rewrites what psutil reads as cmdline)."""
        titles = {}
        for kid in self.children():
            with contextlib.suppress(psutil.Error):
                if kid.status() != psutil.STATUS_ZOMBIE:  # exited, not yet reaped: no cmdline
                    title = title_of(kid)
                    if title:  # empty: it exited between the two reads
                        titles[kid.pid] = title
        return titles

    def running(self, job_id: int) -> list[int]:
        """The pids of children whose title says they run `job_id`."""
        return [pid for pid, title in self.child_titles().items() if f" job {job_id} " in title]

    def master_title(self) -> str:
        return title_of(psutil.Process(self.pid))

    def pool_children(self, pool: str) -> list[int]:
        prefix = f"forkq: {pool} worker "
        return sorted(pid for pid, title in self.child_titles().items() if title.startswith(prefix))

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def events(self, name: str | None = None, **match: Any) -> list[dict[str, Any]]:
        found = parse_json_lines(self.log_text())
        if name is not None:
            found = [e for e in found if e.get("event") == name]
        return [e for e in found if all(e.get(k) == v for k, v in match.items())]

    def wait_event(
        self,
        name: str,
        timeout: float = 10.0,
        where: Callable[[dict[str, Any]], bool] | None = None,
        count: int = 1,
    ) -> list[dict[str, Any]]:
        def found() -> list[dict[str, Any]] | None:
            events = [e for e in self.events(name) if where is None or where(e)]
            return events if len(events) >= count else None

        return wait_until(found, timeout=timeout, message=f"{count} {name} event(s) in {self.name}")

    def describe(self) -> str:
        """The tail of the logs, for assertion messages."""
        rc = None if self.proc is None else self.proc.poll()
        tail = "\n".join(self.log_text().splitlines()[-15:])
        return f"exit={rc}\nstderr: {self.stderr_text()[-2000:]}\nlog tail:\n{tail}"


def title_of(proc: psutil.Process) -> str:
    """The process's title; "" for one that exited since it was listed (a child the
    daemon reaps between the listing and this read is no longer anyone's)."""
    try:
        return " ".join(proc.cmdline()).strip()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return ""


@pytest.fixture(name="daemons")
def daemons_fixture(tmp_path: Path, db_url: str) -> Iterator[Callable[..., Daemon]]:
    """`daemons(pools=..., supervisor=..., name=...)` -> a configured, not yet started Daemon.

    Every daemon made here is killed (session-wide) at teardown, pass or fail.
    """
    made: list[Daemon] = []

    def make(**kwargs: Any) -> Daemon:
        name = kwargs.pop("name", f"daemon{len(made)}")
        daemon = Daemon(tmp_path, kwargs.pop("db_url", db_url), name=name, **kwargs)
        made.append(daemon)
        return daemon

    yield make
    for daemon in made:
        daemon.kill_all()


def wait_check_ticks(store: Any, count: int, timeout: float = 30.0) -> None:
    """Until the chores lease has been renewed `count` times more: each renewal is a check
    tick that led, so `count - 1` ticks have run their chores and judged their alerts
    since (a negative assertion, "still firing", "no resize", waits on work done, not on
    a sleep a slow machine may outrun)."""
    from supervisor.cluster.chores import CHORES_LOCK

    seen: set[Any] = set()

    def renewed() -> bool:
        seen.update(row.expires_at for row, _ in store.list_locks() if row.name == CHORES_LOCK)
        return len(seen) > count

    wait_until(renewed, timeout=timeout, message=f"{count} check ticks")


def record_ids(path: Path) -> list[int]:
    """Job ids in a record file, one per run (a torn last line is not counted)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [int(line.split(",", 1)[0]) for line in text.splitlines() if line.count(",") == 3]


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0
