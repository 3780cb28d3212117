"""The daemon's contract (SPEC "The daemon"), checked against the real `forkq run`.

Each test starts `python -m supervisor run -c FILE` in a session of its own (see
daemon_util.py), on both backends, and judges it from outside: the jobs table, the
processes table, the JSON log, process titles and exit statuses. Every wait has a
deadline; the `daemons` fixture kills whatever is left, pass or fail.

Boot, stopping, reload and resize, refused configurations, systemd, the master's death
and crash loops; the children's timeouts, deaths and recycling and growing pools are in
test_daemon_children.py.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from daemon_util import (
    BROKEN_SOURCE,
    CRASHING_SOURCE,
    HANDLERS_MODULE,
    Daemon,
    daemons_fixture,  # noqa: F401  (the `daemons` fixture)
    session_processes,
    wait_check_ticks,
)
from lifecycle_util import (
    KEEP,
    Factory,
    boot,
    count_status,
    get,
    wait_done,
    wait_running,
    when,
)
from util import dies_with_us, wait_until

from supervisor import Queue, events
from supervisor.daemon.decisions import STARTUP_WINDOW
from supervisor.models import JobState
from supervisor.store import Store

# --- boot, titles, processes table --------------------------------------------------------------


def test_boot_sets_titles_and_registers_every_process(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 2, **KEEP}, "mail": {"workers": 1, **KEEP}})

    assert daemon.master_title() == "forkq: master"
    titles = daemon.child_titles()
    assert sorted(titles.values()) == [
        "forkq: mail worker 1 idle",
        "forkq: work worker 1 idle",
        "forkq: work worker 2 idle",
    ]

    rows = wait_until(
        lambda: rows if len(rows := store.list_processes()) == 4 else None,
        timeout=5,
        message="4 process rows",
    )
    master = [r for r in rows if r.role == "master"]
    workers = [r for r in rows if r.role == "worker"]
    assert [(r.pid, r.host) for r in master] == [(daemon.pid, socket.gethostname())]
    by_pid = {r.pid: r for r in workers}
    assert set(by_pid) == set(titles)
    for pid, title in titles.items():
        assert title.startswith(f"forkq: {by_pid[pid].pool} worker ")
        assert by_pid[pid].host == socket.gethostname()
        assert by_pid[pid].master == master[0].name

    job_id = queue.enqueue("t.sleep", {"seconds": 1.5}, queue="work")
    pid = wait_running(daemon, job_id)
    assert daemon.child_titles()[pid].endswith(f" job {job_id} (t.sleep)")
    assert wait_done(store, job_id).attempts == 1
    wait_until(
        lambda: daemon.child_titles().get(pid, "").endswith(" idle"),
        timeout=5,
        message="the child's title back to idle",
    )


def test_jobs_enqueued_after_start_run_promptly(
    daemons: Factory, store: Store, queue: Queue, db_url: str
) -> None:
    boot(daemons, pools={"work": {"workers": 2, **KEEP}})
    started = time.monotonic()
    ids = queue.enqueue_many([{"handler": "t.noop", "queue": "work"} for _ in range(20)])
    wait_until(lambda: count_status(db_url, "done") == 20, timeout=10, message="20 jobs done")
    print(f"20 jobs enqueued after start done in {time.monotonic() - started:.2f}s")
    assert all(get(store, i).status == JobState.DONE for i in ids)


def test_log_lines_of_many_children_never_splice_on_a_pipe(
    daemons: Factory, queue: Queue, db_url: str
) -> None:
    """journald reads the daemon's stdout through one pipe shared by the master and
    every child: each event must arrive as one whole JSON line."""
    daemon = daemons(pools={"work": {"workers": 4, "claim_batch": 20, **KEEP}})
    queue.enqueue_many([{"handler": "t.noop", "queue": "work"} for _ in range(3000)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "run", "-c", str(daemon.config_path)],
        cwd=daemon.directory,
        env=daemon.environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=dies_with_us(daemon.parent_death_signal),
    )
    lines: list[bytes] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        wait_until(lambda: count_status(db_url, "done") == 3000, timeout=60, message="3000 done")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(timeout=10)
    logged = [json.loads(line) for line in lines]  # a spliced line raises here
    finished = [e for e in logged if e["event"] == events.JOB_FINISHED]
    assert len(finished) >= 3000
    assert len({e["pid"] for e in finished}) >= 2, "the test needs several children writing"


# --- stopping ----------------------------------------------------------------------------------


def test_sigterm_lets_the_running_job_finish(daemons: Factory, store: Store, queue: Queue) -> None:
    daemon = boot(
        daemons, pools={"work": {"workers": 1, **KEEP}}, supervisor={"shutdown_timeout": 15}
    )
    job_id = queue.enqueue("t.sleep", {"seconds": 2}, queue="work")
    wait_running(daemon, job_id)

    assert daemon.stop(timeout=15) == 0

    row = get(store, job_id)
    assert row.status == JobState.DONE
    assert row.attempts == 1
    assert store.list_processes() == []
    assert daemon.events(events.CHILD_KILLED_AT_SHUTDOWN) == []
    assert session_processes(daemon.pid) == []


def test_sigterm_past_shutdown_timeout_kills_and_returns_the_job_uncounted(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    daemon = boot(
        daemons, pools={"work": {"workers": 1, **KEEP}}, supervisor={"shutdown_timeout": 1}
    )
    job_id = queue.enqueue("t.sleep", {"seconds": 30}, queue="work")
    child = wait_running(daemon, job_id)
    started = time.monotonic()

    assert daemon.stop(timeout=10) == 0

    assert time.monotonic() - started < 8
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE
    row = get(store, job_id)
    assert (row.status, row.attempts, row.locked_by) == (JobState.READY, 0, None)
    assert daemon.events(events.CHILD_KILLED_AT_SHUTDOWN, job_id=job_id)
    assert store.list_processes() == []


def test_second_sigterm_hup_or_ttin_during_the_drain_is_harmless(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    daemon = boot(
        daemons, pools={"work": {"workers": 1, **KEEP}}, supervisor={"shutdown_timeout": 15}
    )
    job_id = queue.enqueue("t.sleep", {"seconds": 2}, queue="work")
    wait_running(daemon, job_id)

    daemon.send_signal(signal.SIGTERM)
    daemon.wait_event(events.MASTER_STOPPING)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGTTIN):
        daemon.send_signal(sig)
        time.sleep(0.1)  # one at a time: the queue keeps one of each pending signal

    assert daemon.wait_exit(15) == 0
    # A reload or a resize while stopping is said and ignored, never logged as done.
    said = [e["signal"] for e in daemon.events(events.ALREADY_STOPPING)]
    assert said == ["SIGTERM", "SIGHUP", "SIGTTIN"], said
    assert daemon.events(events.CONFIG_RELOADED) == daemon.events(events.POOL_RESIZED) == []
    row = get(store, job_id)
    assert (row.status, row.attempts) == (JobState.DONE, 1)
    assert daemon.events(events.CHILD_KILLED_AT_SHUTDOWN) == []


def test_sigquit_exits_at_once_and_returns_the_job_uncounted(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    daemon = boot(
        daemons, pools={"work": {"workers": 1, **KEEP}}, supervisor={"shutdown_timeout": 30}
    )
    job_id = queue.enqueue("t.sleep", {"seconds": 30}, queue="work")
    wait_running(daemon, job_id)
    started = time.monotonic()

    assert daemon.stop(timeout=10, sig=signal.SIGQUIT) == 0

    assert time.monotonic() - started < 5
    row = get(store, job_id)
    assert (row.status, row.attempts, row.locked_by) == (JobState.READY, 0, None)
    assert store.list_processes() == []
    wait_until(lambda: session_processes(daemon.pid) == [], timeout=5, message="no process left")


def test_sigquit_of_a_young_daemon_counts_no_child_as_failed_at_start(daemons: Factory) -> None:
    """The idle children a quit kills on purpose came up fine: none is logged as a child
    that failed at start (an error, and a step towards the crash-loop back-off)."""
    daemon = boot(daemons, pools={"work": {"workers": 2}})
    assert daemon.stop(timeout=10, sig=signal.SIGQUIT) == 0
    assert daemon.events(events.CHILD_FAILED_AT_START) == []
    assert daemon.events(events.POOL_CRASH_LOOP) == []


# --- reload and resize ---------------------------------------------------------------------------


def test_hup_replaces_children_with_the_new_worker_count(daemons: Factory) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 1}})
    old = set(daemon.pool_children("work"))
    assert len(old) == 1

    daemon.write_config(pools={"work": {"workers": 3}})
    daemon.send_signal(signal.SIGHUP)

    def replaced() -> bool:
        now = set(daemon.pool_children("work"))
        return len(now) == 3 and not now & old and not any(psutil.pid_exists(p) for p in old)

    wait_until(replaced, timeout=10, message="3 new children, the old one gone")
    daemon.wait_event(events.CONFIG_RELOADED)
    assert daemon.stop() == 0, daemon.describe()


def test_hup_with_an_invalid_config_keeps_the_running_config(daemons: Factory) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 2}})
    before = set(daemon.pool_children("work"))

    daemon.write_config(pools={"work": {"workers": 3, "wrkers": 1}})
    daemon.send_signal(signal.SIGHUP)

    refused = daemon.wait_event(events.RELOAD_REFUSED)
    assert "pools.work.wrkers" in refused[0]["error"]
    assert daemon.alive()
    assert set(daemon.pool_children("work")) == before
    assert daemon.events(events.CHILD_EXITED) == []
    assert daemon.events(events.CONFIG_RELOADED) == []
    assert daemon.stop() == 0, daemon.describe()


def test_ttin_and_ttou_add_and_remove_one_child_in_every_pool(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    daemon = boot(daemons, pools={"work": {"workers": 2}, "mail": {"workers": 1, **KEEP}})

    def sizes(work: int, mail: int) -> Callable[[], bool]:
        return lambda: (
            (
                len(daemon.pool_children("work")),
                len(daemon.pool_children("mail")),
            )
            == (work, mail)
        )

    daemon.send_signal(signal.SIGTTIN)
    wait_until(sizes(3, 2), timeout=10, message="one more child in each pool")
    daemon.send_signal(signal.SIGTTOU)
    wait_until(sizes(2, 1), timeout=10, message="one fewer child in each pool")
    daemon.send_signal(signal.SIGTTOU)
    wait_until(sizes(1, 0), timeout=10, message="one fewer again")
    daemon.send_signal(signal.SIGTTOU)  # mail's maximum stays 1: its queue is still served
    wait_until(sizes(0, 0), timeout=10, message="no child left")
    job_id = queue.enqueue("t.noop", {}, queue="mail")
    assert wait_done(store, job_id, timeout=20).attempts == 1  # a child started for it
    assert daemon.stop() == 0, daemon.describe()


def test_a_pool_of_no_workers_starts_one_when_a_job_waits(
    daemons: Factory, store: Store, queue: Queue
) -> None:
    """`workers = 0` below `max_workers` was accepted, and its queue never ran: only a
    pool whose every child was busy had its backlog counted."""
    daemon = boot(daemons, pools={"mail": {"workers": 0, "max_workers": 2, **KEEP}})
    assert daemon.pool_children("mail") == []
    job_id = queue.enqueue("t.noop", {}, queue="mail")
    assert wait_done(store, job_id, timeout=20).attempts == 1
    assert daemon.stop() == 0, daemon.describe()


# --- refused configurations ---------------------------------------------------------------------------


def assert_refused(daemon: Daemon, words: list[str]) -> None:
    daemon.start()
    assert daemon.wait_exit(30) == 78, daemon.describe()
    stderr = daemon.stderr_text()
    for word in words:
        assert word in stderr, stderr
    assert "Traceback" not in stderr
    assert daemon.events(events.CHILD_SPAWNED) == []
    assert daemon.events(events.MASTER_STARTED) == []
    assert session_processes(daemon.pid) == []


def test_unknown_config_key_exits_78_before_forking(daemons: Factory, store: Store) -> None:
    daemon = daemons(pools={"work": {"workers": 2, "wrkers": 3}})
    assert_refused(daemon, [str(daemon.config_path), "pools.work.wrkers", "unknown key"])
    assert store.list_processes() == []


def test_handler_module_that_fails_to_import_exits_78(daemons: Factory, store: Store) -> None:
    daemon = daemons(pools={"work": {"workers": 2}}, supervisor={"handlers": ["badhandlers"]})
    daemon.write_module("badhandlers", BROKEN_SOURCE)
    assert_refused(daemon, ["badhandlers", "broken on purpose"])
    assert store.list_processes() == []


# --- systemd --------------------------------------------------------------------------------------------


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    """An AF_UNIX datagram socket standing in for systemd (a short path: sun_path is small)."""
    directory = tempfile.mkdtemp(prefix="fq-notify-")
    path = os.path.join(directory, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    yield sock, path
    sock.close()
    shutil.rmtree(directory, ignore_errors=True)


def receive_until(
    sock: socket.socket, messages: list[str], done: Callable[[list[str]], bool], timeout: float
) -> list[str]:
    deadline = time.monotonic() + timeout
    while not done(messages):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for sd_notify messages; got {messages!r}")
        sock.settimeout(min(left, 0.5))
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        messages.extend(data.decode().split("\n"))
    return messages


def test_sd_notify_ready_status_watchdog_and_stopping(
    daemons: Factory, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    daemon = daemons(
        pools={"work": {"workers": 2}},
        supervisor={"shutdown_timeout": 7},
        env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000"},
    )
    daemon.start()
    messages: list[str] = []

    receive_until(sock, messages, lambda m: "READY=1" in m, timeout=20)
    after_ready = messages[messages.index("READY=1") + 1 :]
    receive_until(
        sock,
        after_ready,
        lambda m: any(x.startswith("STATUS=") for x in m),
        timeout=10,
    )
    status = next(x for x in after_ready if x.startswith("STATUS="))
    assert status.startswith("STATUS=2 children"), status  # the children were up before READY
    receive_until(sock, after_ready, lambda m: m.count("WATCHDOG=1") >= 2, timeout=10)

    daemon.send_signal(signal.SIGTERM)
    receive_until(sock, after_ready, lambda m: "STOPPING=1" in m, timeout=10)
    # The drain may take shutdown_timeout (7 s) plus the master's margin (5 s), whatever
    # the unit's TimeoutStopSec says.
    receive_until(sock, after_ready, lambda m: "EXTEND_TIMEOUT_USEC=12000000" in m, timeout=10)
    assert after_ready.index("STOPPING=1") < after_ready.index("EXTEND_TIMEOUT_USEC=12000000")
    assert daemon.wait_exit(15) == 0


def test_sd_notify_without_watchdog_sends_no_watchdog(
    daemons: Factory, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    daemon = daemons(pools={"work": {"workers": 1}}, env={"NOTIFY_SOCKET": path})
    daemon.start()
    messages: list[str] = []
    receive_until(sock, messages, lambda m: "READY=1" in m, timeout=20)
    daemon.wait_event(events.MASTER_STARTED)
    assert daemon.stop() == 0, daemon.describe()
    receive_until(sock, messages, lambda m: "STOPPING=1" in m, timeout=5)
    assert "WATCHDOG=1" not in messages


# --- the master dies ------------------------------------------------------------------------------------


def test_children_exit_when_the_master_is_killed_and_a_restart_loses_nothing(
    daemons: Factory, store: Store, queue: Queue, db_url: str
) -> None:
    pools = {"work": {"workers": 2, **KEEP}}
    first = boot(daemons, pools=pools, name="first")
    ids = queue.enqueue_many(
        [{"handler": "t.sleep", "payload": {"seconds": 0.3}, "queue": "work"} for _ in range(30)]
    )
    wait_until(lambda: count_status(db_url, "done") >= 2, timeout=10, message="some jobs done")
    children = first.pool_children("work")
    assert len(children) == 2

    os.kill(first.pid, signal.SIGKILL)
    first.wait_exit(5)

    wait_until(
        lambda: session_processes(first.pid) == [],
        timeout=10,
        message="the orphaned children gone",
    )
    # A real init reaps orphans at once; the one in some sandboxes takes its time, and
    # until then the pids still exist (as zombies). Start the next master on a reaped host.
    wait_until(
        lambda: not any(psutil.pid_exists(pid) for pid in children),
        timeout=30,
        message="the orphans reaped by init",
    )
    second = boot(daemons, pools=pools, name="second")
    wait_until(
        lambda: count_status(db_url, "done") == len(ids),
        timeout=30,
        message="every job done after the restart",
    )
    assert count_status(db_url, "running") == 0
    assert count_status(db_url, "ready") == 0
    assert count_status(db_url, "dead") == 0
    assert second.stop() == 0, second.describe()
    assert store.list_processes() == []  # the first master's rows were cleaned up too


def test_an_orphaned_child_stuck_past_its_timeout_kills_itself_before_its_lease_ends(
    daemons: Factory, queue: Queue, db_url: str
) -> None:
    """The master killed -9 while a handler ignores the soft timeout and every signal but
    SIGKILL: without the master's overtime kill the child would run it for ever and, once
    the lease expired, beside the next daemon's run of the same job. Its own guard ends
    it at the timeout plus the grace the master gives, inside the lease."""
    first = boot(daemons, pools={"work": {"workers": 2, "timeout": 2}}, name="first")
    stuck = queue.enqueue("t.hang", queue="work", max_attempts=3)
    [child] = wait_until(lambda: first.running(stuck), timeout=10, message="the job running")
    os.kill(first.pid, signal.SIGKILL)
    first.wait_exit(5)
    wait_until(  # at 2 s + KILL_GRACE; the lease runs 2 s + 30 s
        lambda: not psutil.pid_exists(child) or psutil.Process(child).status() == "zombie",
        timeout=20,
        message="the orphan stuck in its job killed",
    )
    row = queue.get(stuck)
    assert row is not None and row.status == "running" and row.attempts == 1  # until reaped
    assert session_processes(first.pid) == []
    [said] = first.events(events.ORPHAN_KILLED)  # the kill is said, with the job it ran
    assert (said["job_id"], said["level"]) == (stuck, "error"), said


# --- crash loops -------------------------------------------------------------------------------------------


def test_child_that_dies_at_start_is_respawned_with_growing_back_off(daemons: Factory) -> None:
    daemon = daemons(
        pools={"work": {"workers": 1}},
        supervisor={"handlers": [HANDLERS_MODULE, "crashhandlers"]},
    )
    daemon.write_module("crashhandlers", CRASHING_SOURCE)
    daemon.start()

    spawned = daemon.wait_event(events.CHILD_SPAWNED, count=5, timeout=30)
    first = when(spawned[0])
    in_window = [e for e in spawned if when(e) - first <= STARTUP_WINDOW]
    assert len(in_window) < 10, len(in_window)
    assert when(spawned[4]) - first >= 5.0  # 0.5 + 1 + 2 + 4 s of back-off, give or take
    gaps = [when(b) - when(a) for a, b in itertools.pairwise(spawned)]
    assert gaps[-1] > gaps[0]
    loop = daemon.wait_event(events.POOL_CRASH_LOOP)
    assert loop[0]["pool"] == "work"
    assert daemon.alive()
    assert daemon.stop() == 0, daemon.describe()


# Worker children die right after the fork; the master's other forks (the check tick,
# which judges the alerts) live: the fork's caller is looked for on the stack.
WORKERS_CRASHING_SOURCE = """\
import os
import sys


def _die_if_a_worker():
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "spawn" and "children" in frame.f_code.co_filename:
            os._exit(3)
        frame = frame.f_back


os.register_at_fork(after_in_child=_die_if_a_worker)
"""


def crash_loop_state(store: Store) -> str | None:
    """The crash_loop alert's state, None before it first fires."""
    rows = {k: v for k, v in store.load_alerts().items() if k.startswith("crash_loop:")}
    return next((row["state"] for row in rows.values()), None)


def test_a_crash_loop_ends_once_a_child_comes_up_while_that_child_lives(
    daemons: Factory, store: Store, tmp_path: Path
) -> None:
    """The fault is mended (here a file goes) and the next child comes up: the alert
    resolves while that child runs on. It waited for the child's exit before, up to
    max_child_lifetime, and went on sending "still firing" for a healthy pool."""
    flag = tmp_path / "broken"
    flag.touch()
    source = WORKERS_CRASHING_SOURCE.replace(
        "def _die_if_a_worker():\n",
        f"def _die_if_a_worker():\n    if not os.path.exists({str(flag)!r}):\n        return\n",
    )
    daemon = daemons(
        pools={"work": {"workers": 1}},
        supervisor={"handlers": [HANDLERS_MODULE, "crashhandlers"]},
    )
    daemon.write_module("crashhandlers", source)
    daemon.start()
    daemon.wait_event(events.POOL_CRASH_LOOP, timeout=30)

    wait_until(lambda: crash_loop_state(store) == "firing", timeout=20, message="crash_loop fires")
    flag.unlink()
    wait_until(lambda: crash_loop_state(store) == "ok", timeout=40, message="crash_loop resolved")
    [*_, last] = daemon.events(events.CHILD_SPAWNED)
    assert psutil.Process(last["child_pid"]).status() != psutil.STATUS_ZOMBIE  # it lives on
    assert daemon.stop() == 0, daemon.describe()


def test_a_stop_right_after_a_reload_is_no_failure_at_start(daemons: Factory) -> None:
    """TERM just after HUP: the reload's new children are stopped while they start. That
    is the operator's doing, not a child that cannot start (it logged child_failed_at_start
    as an error and counted a step towards the crash-loop back-off)."""
    daemon = daemons(pools={"work": {"workers": 4}})
    daemon.start().wait_ready()
    daemon.send_signal(signal.SIGHUP)
    daemon.wait_event(events.CONFIG_RELOADED)
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait_exit(30) == 0, daemon.describe()
    assert daemon.events(events.CHILD_FAILED_AT_START) == [], daemon.describe()


def test_a_reload_during_a_crash_loop_neither_resolves_it_nor_waits_out_its_back_off(
    daemons: Factory, store: Store
) -> None:
    """An operator sends HUP after deploying a fix: the pool's next child starts at once,
    and the crash loop is over only once a child starts (here none does: no "resolved")."""
    daemon = daemons(
        pools={"work": {"workers": 1}},
        supervisor={"handlers": [HANDLERS_MODULE, "crashhandlers"]},
    )
    daemon.write_module("crashhandlers", WORKERS_CRASHING_SOURCE)
    daemon.start()
    daemon.wait_event(events.POOL_CRASH_LOOP, timeout=30)

    wait_until(lambda: crash_loop_state(store) == "firing", timeout=20, message="crash_loop fires")
    spawned = len(daemon.events(events.CHILD_SPAWNED))
    daemon.send_signal(signal.SIGHUP)
    [reloaded] = daemon.wait_event(events.CONFIG_RELOADED)
    [*_, respawn] = daemon.wait_event(events.CHILD_SPAWNED, count=spawned + 1, timeout=10)
    assert when(respawn) - when(reloaded) < 1.0  # not after the back-off the loop had grown
    wait_check_ticks(store, 4)  # each judges the rule
    assert crash_loop_state(store) == "firing"
    assert daemon.stop() == 0, daemon.describe()
