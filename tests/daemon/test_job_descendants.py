"""A job owns its descendants (issue 12, item 10): when it ends, whatever it started dies.

The real daemon runs handlers that leave processes behind: `sleep 300` in the background
(a child never waited for, a shell's `&` orphan, one that ignores SIGTERM), processes
that escape into sessions of their own (`setsid`, a double fork), a handler that forks
and returns in both processes, and a job ended by its soft timeout with a grandchild
still running. After each job nothing it started is alive anywhere — not in the
daemon's session, not re-parented to init — the pool runs its next jobs in its own
children, and after the daemon stops no process of it remains, `forkq:` titled or not.

Processes of this daemon are told from other daemons on the machine by their working
directory: the daemon runs in the test's own directory, and everything it forks or
starts inherits it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from daemon_util import Daemon, record_ids, title_of
from util import REPO_ROOT, wait_until

from supervisor import Queue, events
from supervisor.models import JobRow

pytestmark = pytest.mark.timeout(180)

QUEUE = "work"
POOL = {"workers": 1, "max_workers": 1, "timeout": 30}

LEFTOVERS_SOURCE = '''\
"""Handlers that leave processes behind (written by tests/daemon/test_job_descendants.py)."""

import os
import subprocess
import time

from supervisor import handler


def note(payload, pid):
    """Append a pid the job started to payload["pids"], in one O_APPEND write."""
    fd = os.open(payload["pids"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{pid}\\n".encode())
    finally:
        os.close(fd)


def wait_noted(payload, count):
    """Until `count` pids are noted (a process that notes its own pid does it late)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(payload["pids"]) as file:
            if len(file.read().split()) >= count:
                return
        time.sleep(0.01)
    raise RuntimeError("a started process never noted its pid")


def shell_background(command):
    """`command &` in a shell that exits at once: the process is orphaned."""
    out = subprocess.run(
        ["sh", "-c", command + " >/dev/null 2>&1 </dev/null & echo $!"],
        capture_output=True, text=True, check=True,
    )
    return int(out.stdout)


@handler("t.background")
def background(payload, job):
    """`sleep 300` three ways: a child never waited for, a shell's `&` orphan, and an
    orphan that ignores SIGTERM (only SIGKILL ends it)."""
    note(payload, subprocess.Popen(["sleep", "300"]).pid)
    note(payload, shell_background("sleep 300"))
    note(payload, shell_background("trap '' TERM; exec sleep 300"))


@handler("t.setsid")
def escaped(payload, job):
    """Escapes into sessions of their own: a child started with setsid, and a daemon-style
    double fork (`setsid -f`: the middle process exits, the sleeper is an orphan)."""
    note(payload, subprocess.Popen(["sleep", "300"], start_new_session=True).pid)
    subprocess.run(
        ["setsid", "-f", "sh", "-c", 'echo $$ >> "$0"; exec sleep 300', payload["pids"]],
        check=True,
    )
    wait_noted(payload, 2)


@handler("t.fork")
def forks(payload, job):
    """Forks and returns in both processes: no os._exit in the copy."""
    pid = os.fork()
    if pid:
        note(payload, pid)
    elif payload.get("copy") == "raise":
        raise RuntimeError("the forked copy raises")


@handler("t.timeout_leftover", timeout=1, max_attempts=1)
def overtime(payload, job):
    """Starts a background `sleep 300`, then overstays: the soft timeout ends the job."""
    note(payload, shell_background("sleep 300"))
    time.sleep(60)
'''


@pytest.fixture
def daemon(tmp_path: Path, mysql_db_url: str) -> Iterator[Daemon]:
    made = Daemon(
        tmp_path / "daemon",
        mysql_db_url,
        pools={QUEUE: POOL},
        supervisor={"handlers": ["testhandlers", "leftovers"]},
    )
    made.write_module("leftovers", LEFTOVERS_SOURCE)
    made.start().wait_ready()
    yield made
    made.kill_all()
    for proc in ours(made):  # what its teardown cannot see (other sessions): a failed test's
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)


@pytest.fixture
def queue(mysql_db_url: str) -> Iterator[Queue]:
    q = Queue(mysql_db_url, wake=False)
    yield q
    q.close()


# --- looking at processes ----------------------------------------------------------------------


def ours(daemon: Daemon) -> list[psutil.Process]:
    """Every live process the daemon started, whatever its session or parent now: all
    inherited the daemon's working directory."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.cwd() == str(daemon.directory) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def gone(pid: int) -> bool:
    """Neither alive nor a zombie: killed and reaped (a pid is not reused within seconds)."""
    return not psutil.pid_exists(pid)


def describe(pids: list[int]) -> dict[int, str]:
    """pid -> title, parent and session of each process still there, for a failure message."""
    found = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            proc = psutil.Process(pid)
            found[pid] = (
                f"{title_of(proc) or proc.name()!r} ({proc.status()}, parent {proc.ppid()}, "
                f"session {os.getsid(pid)})"
            )
    return found


def noted(path: Path) -> list[int]:
    try:
        return [int(word) for word in path.read_text().split()]
    except FileNotFoundError:
        return []


def beside_master_and_children(daemon: Daemon) -> dict[int, str]:
    """pid -> title of every process of the daemon besides the master and its children."""
    expected = {daemon.pid, *(kid.pid for kid in daemon.children())}
    extra = {}
    for proc in ours(daemon):
        if proc.pid not in expected:
            try:
                extra[proc.pid] = title_of(proc) or proc.name()
            except psutil.Error:
                continue
    return extra


def assert_nothing_left(daemon: Daemon, pids: list[int]) -> None:
    """The job's processes are killed and reaped, the pool children have no descendants,
    and nothing of the daemon lives outside the master and its children."""
    try:
        wait_until(lambda: all(gone(pid) for pid in pids), timeout=30, message=f"{pids} gone")
    except AssertionError:
        raise AssertionError(f"the job's processes outlived it: {describe(pids)}") from None
    wait_until(
        lambda: not beside_master_and_children(daemon),
        timeout=30,
        message=f"nothing but the master and its children: {beside_master_and_children(daemon)}",
    )
    for pid in daemon.pool_children(QUEUE):
        assert psutil.Process(pid).children(recursive=True) == [], f"worker {pid} has children"


def assert_keeps_working(daemon: Daemon, queue: Queue, tmp_path: Path, jobs: int = 5) -> None:
    """The pool runs its next jobs, each once, in its own children (not in a stray copy)."""
    record = tmp_path / "after.csv"
    record.unlink(missing_ok=True)
    ids = [queue.enqueue("t.record", {"file": str(record)}, queue=QUEUE) for _ in range(jobs)]
    wait_until(lambda: len(record_ids(record)) >= jobs, timeout=30, message="next jobs run")
    assert sorted(record_ids(record)) == sorted(ids)
    workers = set(daemon.pool_children(QUEUE))
    ran_in = {int(line.split(",")[1]) for line in record.read_text().splitlines()}
    assert ran_in <= workers, f"jobs ran in {ran_in}, the pool's children are {workers}"


def assert_stop_leaves_nothing(daemon: Daemon) -> None:
    """After a graceful stop no process of the daemon is left, `forkq:` titled or other."""
    assert daemon.stop(timeout=30) == 0, daemon.describe()
    wait_until(
        lambda: not ours(daemon),
        timeout=30,
        message=f"no process of the daemon left: {[title_of(p) for p in ours(daemon)]}",
    )


def leftovers_logged(daemon: Daemon, job_id: int) -> dict[str, object]:
    seen = daemon.wait_event(
        events.JOB_LEFTOVERS_KILLED, timeout=30, where=lambda e: e.get("job_id") == job_id
    )
    return seen[-1]


def finished(daemon: Daemon, job_id: int) -> dict[str, object]:
    seen = daemon.wait_event(
        events.JOB_FINISHED, timeout=30, where=lambda e: e.get("job_id") == job_id
    )
    return seen[-1]


def ended_dead(queue: Queue, job_id: int) -> JobRow | None:
    row = queue.get(job_id)
    return row if row is not None and row.status == "dead" else None


# --- the cases ---------------------------------------------------------------------------------


def test_background_sleeps_of_a_finished_job_are_killed_with_it(
    daemon: Daemon, queue: Queue, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    job_id = queue.enqueue("t.background", {"pids": str(pids)}, queue=QUEUE)
    assert finished(daemon, job_id)["outcome"] == "done"
    assert len(noted(pids)) == 3
    assert_nothing_left(daemon, noted(pids))
    logged = leftovers_logged(daemon, job_id)
    assert logged["killed"] == 3 and logged["sigkilled"] == 1, logged  # the TERM-deaf one
    assert logged["survivors"] == 0
    assert_keeps_working(daemon, queue, tmp_path)
    assert_stop_leaves_nothing(daemon)


def test_processes_that_escape_with_setsid_are_killed_with_the_job(
    daemon: Daemon, queue: Queue, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    job_id = queue.enqueue("t.setsid", {"pids": str(pids)}, queue=QUEUE)
    assert finished(daemon, job_id)["outcome"] == "done"
    escaped = noted(pids)
    assert len(escaped) == 2
    assert_nothing_left(daemon, escaped)
    assert leftovers_logged(daemon, job_id)["killed"] == 2
    assert_keeps_working(daemon, queue, tmp_path)
    assert_stop_leaves_nothing(daemon)


@pytest.mark.parametrize("copy", ["return", "raise"])
def test_a_handler_that_forks_and_returns_twice_leaves_one_worker(
    daemon: Daemon, queue: Queue, tmp_path: Path, copy: str
) -> None:
    pids = tmp_path / "pids"
    job_id = queue.enqueue("t.fork", {"pids": str(pids), "copy": copy}, queue=QUEUE)
    finished(daemon, job_id)
    wait_until(lambda: noted(pids), timeout=10, message="the fork noted")
    assert_nothing_left(daemon, noted(pids))
    # One worker finished the job, once: the copy neither ran the loop nor wrote an outcome.
    ends = daemon.events(events.JOB_FINISHED, job_id=job_id)
    assert [e["outcome"] for e in ends] == ["done"], ends
    assert queue.get(job_id) is None  # done and deleted, as on_success says
    assert_keeps_working(daemon, queue, tmp_path, jobs=20)
    assert len(daemon.pool_children(QUEUE)) == 1
    assert_stop_leaves_nothing(daemon)


def test_a_soft_timeout_kills_the_grandchild_its_job_left(
    daemon: Daemon, queue: Queue, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    job_id = queue.enqueue("t.timeout_leftover", {"pids": str(pids)}, queue=QUEUE, max_attempts=1)
    assert "timed out" in str(finished(daemon, job_id)["error"])
    row = wait_until(lambda: ended_dead(queue, job_id), timeout=10, message="the job dead")
    assert "timed out" in (row.last_error or "")
    assert_nothing_left(daemon, noted(pids))
    assert leftovers_logged(daemon, job_id)["killed"] == 1
    assert not daemon.events(events.JOB_TIMED_OUT), "the soft timeout ended it, not the master"
    assert_keeps_working(daemon, queue, tmp_path)
    assert_stop_leaves_nothing(daemon)


# --- the mechanism outside the daemon ----------------------------------------------------------

SWEEP_SCRIPT = """\
import json, os, subprocess
from supervisor.work.descendants import become_subreaper, kill_leftovers, reap_children

assert become_subreaper()
assert kill_leftovers(1) is None  # nothing started: nothing to do, nothing logged
zombie = os.spawnlp(os.P_NOWAIT, "true", "true")
os.waitid(os.P_PID, zombie, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
subprocess.run(["setsid", "-f", "sleep", "300"], check=True)  # an orphan in its own session
# Two that ignore SIGTERM (SIG_IGN is inherited across exec): only SIGKILL ends them.
subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & exec sleep 300"])
result = kill_leftovers(7)
print(json.dumps({"killed": result.killed, "sigkilled": result.forced,
                  "survivors": result.survivors, "left": reap_children(),
                  "zombie_reaped": not os.path.exists(f"/proc/{zombie}")}))
"""


def test_sweep_kills_orphans_in_other_sessions_and_the_term_deaf_and_reaps_zombies(
    tmp_path: Path,
) -> None:
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP_SCRIPT)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "PYTHONPATH": str(REPO_ROOT)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    figures = result.stdout.strip().splitlines()[-1]
    expected = {"killed": 3, "sigkilled": 2, "survivors": 0, "left": False, "zombie_reaped": True}
    assert json.loads(figures) == expected, (
        figures,
        result.stderr[-2000:],
        time.monotonic() - started,
    )
