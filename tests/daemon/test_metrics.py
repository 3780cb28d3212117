"""Metrics and health of the real daemon (`[metrics] listen`), on both backends.

/metrics is parsed with prometheus-client's parser; its counters equal what happened
(jobs done, retried, dead, through recycled children), its gauges match the pool and
the queue; /healthz is 200 while the master loop turns and 503 once it stopped for more
than 5 s (SIGSTOP); the metrics server dies with a SIGKILLed master, and a stopped
daemon leaves no metrics directory behind.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from daemon_util import HANDLERS_MODULE, Daemon, daemons_fixture, render_config, title_of
from prometheus_client.parser import text_string_to_metric_families
from util import backend_of, free_tcp_port, mysql_connect, wait_until

from supervisor import Queue, events
from supervisor.observe.metrics import SERIES

daemons = daemons_fixture


@pytest.fixture(autouse=True)
def _no_inherited_metrics_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own PROMETHEUS_MULTIPROC_DIR must not reach the daemons."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

MODULE = "metricshandlers"
SOURCE = '''\
import os
import time

from supervisor import Fail, Retry, handler


@handler("m.flaky")
def flaky(payload, job):
    """Fails its first attempt (retried at once), succeeds on the second."""
    if job.attempts <= 1:
        raise Retry(0, "first attempts fail")


@handler("m.dead")
def dead(payload, job):
    raise Fail("never works")


@handler("m.done_on_term")
def done_on_term(payload, job):
    """Starts (its file), then returns as soon as its child hears SIGTERM (a cancel's first
    signal), which the worker then hears too: the attempt ends done before the kill."""
    import signal

    told = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: told.append(signum))
    open(payload["started"], "w").close()
    deadline = time.monotonic() + 60
    try:
        while not told and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if told and callable(previous):
        previous(signal.SIGTERM, None)


@handler("m.gated")
def gated(payload, job):
    """Starts (its file), then waits for the test's gate."""
    open(payload["started"], "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(payload["gate"]) and time.monotonic() < deadline:
        time.sleep(0.02)
'''


def metrics_daemon(
    daemons: Callable[..., Daemon], pools: dict[str, dict[str, Any]] | None = None, extra: str = ""
) -> tuple[Daemon, str]:
    """A daemon with [metrics] on a free loopback port (and `extra` TOML), and the base URL."""
    port = free_tcp_port()
    daemon = daemons(
        pools=pools or {"work": {"workers": 2}},
        supervisor={"handlers": [HANDLERS_MODULE, MODULE]},
    )
    daemon.write_module(MODULE, SOURCE)
    text = render_config(daemon.db_url, daemon.pools, daemon.supervisor)
    daemon.write_config(text=text + f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n' + extra)
    return daemon, f"http://127.0.0.1:{port}"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except OSError as exc:  # not listening (yet)
        return 0, str(exc)


def file_pid(name: str) -> int | None:
    """The pid in a multiprocess file's name (counter_123.db), None for the archives."""
    pid = name.removesuffix(".db").rsplit("_", 1)[-1]
    return int(pid) if pid.isdigit() else None


def scrape(base: str) -> Samples:
    status, text = get(base + "/metrics")
    assert status == 200, text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def finished(samples: Samples, handler: str, outcome: str) -> float:
    labels = {"queue": "work", "handler": handler, "outcome": outcome}
    return samples.get(key("forkq_jobs_finished_total", **labels), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, found), v in samples.items() if n == name and wanted <= found)


def serving(daemon: Daemon, base: str) -> str:
    """Wait for the server; the metrics directory the master made."""
    [event] = daemon.wait_event(events.METRICS_SERVING, timeout=20)
    wait_until(lambda: get(base + "/healthz")[0] == 200, timeout=20, message="/healthz 200")
    return str(event["directory"])


def metrics_server(daemon: Daemon) -> psutil.Process:
    servers = [k for k in daemon.children() if title_of(k) == "forkq: master metrics"]
    assert len(servers) == 1, daemon.child_titles()
    return servers[0]


def test_counters_equal_what_happened_and_gauges_match_the_pool(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    # "quiet" never holds a job: its series read 0, as `forkq status` shows it (they were
    # left out, and a drained queue's vanished).
    pools = {"work": {"workers": 2, "max_workers": 3, "max_jobs_per_child": 7}, "quiet": {}}
    daemon, base = metrics_daemon(daemons, pools, "\n[alerts.rules.work]\nmax_dead = 1\n")
    daemon.start().wait_ready()
    directory = serving(daemon, base)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700

    queue = Queue(db_url)
    done, flaky, dead = 20, 5, 3
    for _ in range(done):
        queue.enqueue("t.noop", {}, queue="work")
    for _ in range(flaky):
        queue.enqueue("m.flaky", {}, queue="work")
    for _ in range(dead):
        queue.enqueue("m.dead", {}, queue="work")
    queue.enqueue("no.such.handler", {}, queue="work")  # dead at once, label "(unregistered)"
    for _ in range(4):
        queue.enqueue("t.noop", {}, queue="work", delay=3600)  # scheduled, never run here

    attempts = done + 2 * flaky + dead + 1

    def drained() -> Samples | None:
        found = scrape(base)
        counted = total(found, "forkq_jobs_finished_total")
        timed = total(found, "forkq_job_duration_seconds_count")
        assert counted <= attempts and timed <= attempts, found  # never more than what ran
        return found if counted == timed == attempts else None  # a scrape between the two

    found = wait_until(drained, timeout=60, message=f"{attempts} attempts counted")
    assert finished(found, "t.noop", "done") == done
    assert finished(found, "m.flaky", "retry") == flaky
    assert finished(found, "m.flaky", "done") == flaky
    assert finished(found, "m.dead", "dead") == dead
    assert finished(found, "(unregistered)", "dead") == 1
    assert total(found, "forkq_job_duration_seconds_count") == attempts
    assert found[key("forkq_job_duration_seconds_count", queue="work", handler="m.flaky")] == 10
    assert total(found, "forkq_db_errors_total") == 0
    # 7 jobs per child at most: the work above went through recycled children, whose
    # files were folded into the archives (and their counts kept, as checked above).
    # 7 jobs a child for 34 attempts: at least 4 children recycled, each counted once the
    # master reaps it, which may come just after the scrape that saw the last attempt.
    wait_until(
        lambda: total(scrape(base), "forkq_child_exits_total", pool="work", reason="max_jobs") >= 3,
        timeout=30,
        message="3 children recycled after their 7th job",
    )
    names = os.listdir(directory)
    assert "counter_archive.db" in names and "histogram_archive.db" in names
    # A child may exit (recycled after its 7th job) just after the scrape above: its file
    # waits for the next scrape. Every file of a process gone before a scrape is folded
    # by it, and only files of live processes stay.
    gone = {name for name in names if (pid := file_pid(name)) and not psutil.pid_exists(pid)}
    scrape(base)
    left = set(os.listdir(directory))
    assert not gone & left, f"{sorted(gone & left)}: files of gone processes not folded"
    live = {p.pid for p in psutil.Process(daemon.pid).children(recursive=True)} | {daemon.pid}
    for name in left:
        pid = file_pid(name)
        assert pid is None or pid in live or not psutil.pid_exists(pid), f"{name}: not ours"

    def pool_matches() -> Samples | None:
        found = scrape(base)
        kids = len(daemon.pool_children("work"))
        busy = found.get(key("forkq_pool_workers", pool="work", state="busy"))
        idle = found.get(key("forkq_pool_workers", pool="work", state="idle"))
        return found if (busy, idle) == (0, kids) and kids >= 2 else None

    found = wait_until(pool_matches, timeout=20, message="pool gauges = live children, idle")
    assert found[key("forkq_pool_max_workers", pool="work")] == 3

    def queue_figures() -> Samples | None:  # from the next check tick on the lease holder
        found = scrape(base)
        jobs = {
            status: found.get(key("forkq_queue_jobs", queue="work", status=status))
            for status in ("ready", "scheduled", "running", "dead")
        }
        expected = {"ready": 0, "scheduled": 4, "running": 0, "dead": dead + 1}
        firing = found.get(key("forkq_alerts_firing", rule="max_dead", queue="work"))
        quiet = found.get(key("forkq_queue_jobs", queue="quiet", status="ready"))
        return found if jobs == expected and firing == 1 and quiet == 0 else None

    found = wait_until(queue_figures, timeout=20, message="queue gauges and alert from a tick")
    assert found[key("forkq_chores_leader")] == 1
    names = {name for name, _ in found}
    for series in SERIES:  # every series the README lists is there
        assert any(n == series or n.startswith(series + "_") for n in names), series
    assert found[key("forkq_queue_oldest_ready_seconds", queue="work")] == 0
    assert abs(found[key("forkq_master_loop_timestamp_seconds")] - time.time()) < 5

    assert daemon.stop() == 0, daemon.describe()
    assert not os.path.exists(directory)  # removed at shutdown


def test_healthz_is_503_while_the_master_loop_is_stopped(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    daemon, base = metrics_daemon(daemons)
    daemon.start().wait_ready()
    serving(daemon, base)
    status, text = get(base + "/healthz")
    assert status == 200 and text.startswith("ok:"), text

    daemon.send_signal(signal.SIGSTOP)
    try:
        stopped = wait_until(
            lambda: (answer := get(base + "/healthz"))[0] == 503 and answer,
            timeout=20,
            message="/healthz 503 while the master is stopped",
        )
        assert "master loop last turned" in stopped[1], stopped
        assert get(base + "/metrics")[0] == 200  # a scrape never waits on the master
    finally:
        daemon.send_signal(signal.SIGCONT)
    wait_until(lambda: get(base + "/healthz")[0] == 200, timeout=20, message="/healthz 200 again")
    assert daemon.stop() == 0, daemon.describe()


@contextmanager
def chores_blocked(db_url: str) -> Iterator[None]:
    """Hold what the check tick's chores write first, from outside, until the block ends:
    SQLite's write lock; on MariaDB the rows of forkq_locks (the chores lease)."""
    if backend_of(db_url) == "sqlite":
        holder = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    else:
        holder = mysql_connect(db_url)
        holder.begin()
        holder.cursor().execute("SELECT * FROM forkq_locks FOR UPDATE")
    try:
        yield
    finally:
        holder.rollback()
        holder.close()


def test_healthz_is_503_while_the_database_does_not_answer(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    daemon, base = metrics_daemon(daemons, {"work": {"workers": 1}})
    daemon.start().wait_ready()
    serving(daemon, base)
    daemon.wait_event(events.CHECK_TICK, where=lambda e: e.get("leader") is True)  # the lease row
    with chores_blocked(db_url):
        answer = wait_until(
            lambda: (
                "did not answer at the last check" in (found := get(base + "/healthz"))[1] and found
            ),
            timeout=30,
            message="/healthz naming the database",
        )
        assert answer[0] == 503, answer
    wait_until(lambda: get(base + "/healthz")[0] == 200, timeout=30, message="/healthz 200 again")
    assert total(scrape(base), "forkq_db_errors_total") >= 1
    assert daemon.stop() == 0, daemon.describe()


def test_the_metrics_server_dies_with_a_killed_master(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    daemon, base = metrics_daemon(daemons)
    daemon.start().wait_ready()
    serving(daemon, base)
    server = metrics_server(daemon)
    daemon.send_signal(signal.SIGKILL)

    def gone() -> bool:
        try:
            return server.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_until(gone, timeout=10, message="the metrics server gone with its master")
    assert get(base + "/healthz")[0] == 0  # nothing listens any more


def exited(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # init reaps it in time
    except psutil.NoSuchProcess:
        return True


def test_a_restart_after_a_kill_9_leaves_the_orphans_metrics_directory_to_them(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    """The next master removed the directory of a master killed -9 while that master's
    orphaned child still ran its job: the child died recording the job's end, before its
    success was written, and the job ran again once its lease ran out."""
    pools = {"work": {"workers": 1, "on_success": "keep"}}
    first, base = metrics_daemon(daemons, pools)
    first.start().wait_ready()
    directory = serving(first, base)
    started, gate = tmp_path / "started", tmp_path / "gate"
    queue = Queue(db_url)
    job_id = queue.enqueue("m.gated", {"started": str(started), "gate": str(gate)}, queue="work")
    wait_until(started.exists, timeout=30, message="the job started")
    [orphan] = first.pool_children("work")
    os.kill(first.pid, signal.SIGKILL)
    first.wait_exit(5)
    second, second_base = metrics_daemon(daemons, pools)
    second.start().wait_ready()
    serving(second, second_base)
    assert os.path.isdir(directory)  # kept: the orphan's series are in it
    gate.touch()
    wait_until(lambda: exited(orphan), timeout=30, message="the orphan's exit")
    row = queue.get(job_id)
    assert row is not None and (row.status, row.attempts) == ("done", 1), row
    assert not first.events(events.CHILD_CRASHED), first.describe()
    assert second.stop() == 0, second.describe()
    queue.close()


def test_without_the_metrics_section_there_is_no_server(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    daemon = daemons(pools={"work": {"workers": 1}})
    daemon.start().wait_ready()
    titles = daemon.child_titles().values()
    assert "forkq: master metrics" not in titles
    assert not daemon.events(events.METRICS_SERVING)
    environment = psutil.Process(daemon.pool_children("work")[0]).environ()
    assert "PROMETHEUS_MULTIPROC_DIR" not in environment
    assert daemon.stop() == 0, daemon.describe()


def test_every_attempt_past_its_timeout_counts_timeout_and_kills_name_the_handler(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    """SPEC: `timeout` for every attempt that ran past its timeout, whether the handler
    got the soft timeout (t.sleep) or the master killed it (t.hang, deaf to it); the
    job's handler also when the master ended the attempt (a kill, a cancel)."""
    pools = {"work": {"workers": 2, "timeout": 1}, "slow": {"workers": 1, "timeout": 120}}
    daemon, base = metrics_daemon(daemons, pools)
    daemon.start().wait_ready()
    serving(daemon, base)
    queue = Queue(db_url)
    queue.enqueue("t.sleep", {"seconds": 30}, queue="work", max_attempts=1)
    queue.enqueue("t.hang", {}, queue="work", max_attempts=1)
    running = queue.enqueue("t.sleep", {"seconds": 300}, queue="slow")

    # Its handler started (the child's title says so), not only claimed: the cancel
    # must kill a running handler.
    wait_until(lambda: daemon.running(running), timeout=20, message="the slow job runs")
    assert queue.cancel(running)

    def counted(handler: str, outcome: str, name: str = "work") -> float:
        labels = {"queue": name, "handler": handler, "outcome": outcome}
        return scrape(base).get(key("forkq_jobs_finished_total", **labels), 0.0)

    wait_until(lambda: counted("t.sleep", "timeout") == 1, timeout=30, message="soft timeout")
    wait_until(lambda: counted("t.hang", "timeout") == 1, timeout=30, message="master kill")
    wait_until(
        lambda: counted("t.sleep", "cancelled", "slow") == 1, timeout=30, message="cancelled"
    )
    found = scrape(base)
    assert total(found, "forkq_jobs_finished_total", outcome="dead") == 0, found
    assert total(found, "forkq_jobs_finished_total", handler="") == 0, found
    assert total(found, "forkq_jobs_finished_total") == 3, found
    assert daemon.stop() == 0, daemon.describe()


def test_a_cancel_its_handler_beat_counts_done_once_and_nothing_cancelled(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    """A handler that returns between the cancel's SIGTERM and its SIGKILL: the attempt is
    done, as its row says, so the metrics count it done once and never cancelled, the row
    keeps no "cancelled by" as its last error, and a child that exited by itself after it
    is not counted as one a cancel killed."""
    daemon, base = metrics_daemon(daemons, {"work": {"workers": 1, "on_success": "keep"}})
    daemon.start().wait_ready()
    serving(daemon, base)
    queue = Queue(db_url)
    started = tmp_path / "started"
    try:
        job_id = queue.enqueue("m.done_on_term", {"started": str(started)}, queue="work")
        wait_until(started.exists, timeout=20, message="the handler started")
        assert queue.cancel(job_id) is True
        row = wait_until(
            lambda: (r := queue.get(job_id)) and r.status == "done" and r,
            timeout=20,
            message=f"the job done ({daemon.describe()})",
        )
        assert row.last_error is None
        [gone] = daemon.wait_event(events.CHILD_EXITED, timeout=20)
        wait_until(
            lambda: total(scrape(base), "forkq_child_exits_total", pool="work") >= 1,
            timeout=20,
            message="the child's exit counted",
        )
        found = scrape(base)
        assert finished(found, "m.done_on_term", "done") == 1, found
        assert total(found, "forkq_jobs_finished_total", outcome="cancelled") == 0, found
        if gone["status"] == "exit 0":  # it exited before the SIGKILL (0.5 s): not killed
            assert total(found, "forkq_child_exits_total", reason="cancelled") == 0, found
    finally:
        queue.close()
    assert daemon.stop() == 0, daemon.describe()
