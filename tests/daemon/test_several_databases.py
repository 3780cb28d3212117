"""`forkq run` with `[databases.NAME]`: a supervisor, a master per database (issue 24).

Two real databases each time (two SQLite files, or two MariaDB databases on the shared
server), jobs enqueued into each with `Queue(url)`, a real daemon: each pool drains
only its own database, a schedule fires in its handler's database, stop, HUP and a
killed master's respawn work, and a database that does not answer is named while the
other's queues go on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from daemon_util import Daemon, title_of
from private_mariadb import Webhook
from util import (
    REPO_ROOT,
    applied,
    count_rows,
    create_database,
    drop_database,
    free_tcp_port,
    sqlite_url_for,
    wait_until,
    with_database,
)

from supervisor import Queue, events
from supervisor.dburl import parse_database_url

MODULE = "severalhandlers"
HANDLERS = '''\
import os

from supervisor import handler


def _note(payload, job):
    line = f"{job.id},{job.queue},{os.getpid()},{os.getppid()}\\n".encode()
    fd = os.open(payload["file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@handler("m.where")
def where(payload, job):
    """Append `id,queue,pid,ppid`: the ppid is the master that forked this worker."""
    _note(payload, job)


@handler("m.beat", queue="beta")
def beat(payload, job):
    _note(payload, job)
'''
SUPERVISOR = {
    "handlers": [MODULE],
    "check_interval": 0.5,
    "heartbeat_interval": 0.5,
    "poll_interval": 0.02,
    "shutdown_timeout": 10,
}


@pytest.fixture(params=["sqlite", "mysql"])
def empty_pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two databases without forkq's tables (SQLite: not yet created): (home, other)."""
    if request.param == "sqlite":
        yield sqlite_url_for(tmp_path / "home.db"), sqlite_url_for(tmp_path / "other.db")
        return
    server = request.getfixturevalue("mysql_server_url")
    urls = [with_database(server, f"forkq_several_{os.getpid()}_{n}") for n in ("a", "b")]
    for url in urls:
        create_database(url)
    yield urls[0], urls[1]
    for url in urls:
        drop_database(url)


@pytest.fixture
def pair(empty_pair: tuple[str, str]) -> tuple[str, str]:
    """Two databases with the schema applied: (home, other)."""
    return applied(empty_pair[0]), applied(empty_pair[1])


def cli(directory: Path, config: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`forkq ARGS -c CONFIG` in `directory`, with no FORKQ_* variable of ours."""
    (directory / "forkq.toml").write_text(config)
    (directory / f"{MODULE}.py").write_text(HANDLERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(directory), str(REPO_ROOT)])

    def forkq(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "supervisor", *args, "-c", str(directory / "forkq.toml")]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    return forkq


def test_forkq_work_claims_from_its_queues_database(pair: tuple[str, str], tmp_path: Path) -> None:
    home, other = pair
    log = tmp_path / "ran.txt"
    forkq = cli(tmp_path, config_text(home, {"other": (other, ["beta"])}))
    stray = enqueue(home, "beta", 1, log)
    mine = enqueue(other, "beta", 2, log)
    worked = forkq("work", "--queues", "beta", "--burst")
    assert worked.returncode == 0, worked
    assert sorted((job, queue) for job, queue, *_ in records(log)) == [(j, "beta") for j in mine]
    assert count_rows(other, "forkq_jobs") == 0
    assert count_rows(home, "forkq_jobs", "id = ? AND status = 'ready'", stray) == 1


def test_schema_apply_and_check_cover_both_databases(
    empty_pair: tuple[str, str], tmp_path: Path
) -> None:
    home, other = empty_pair
    forkq = cli(tmp_path, config_text(home, {"other": (other, ["beta"])}))
    applied_now = forkq("schema", "apply")
    assert applied_now.returncode == 0, applied_now
    assert "applied to default: " in applied_now.stdout
    assert "applied to other: " in applied_now.stdout
    assert count_rows(home, "forkq_jobs") == 0 and count_rows(other, "forkq_jobs") == 0
    checked = forkq("check")
    assert checked.returncode == 0, checked
    assert "ok    schema    default: version" in checked.stdout
    assert "ok    schema    other: version" in checked.stdout


def config_text(home: str, databases: dict[str, tuple[str, list[str]]], extra: str = "") -> str:
    lines = ["[database]", f'url = "{home}"', "", "[supervisor]"]
    lines += [f"{k} = {v!r}".replace("'", '"') for k, v in SUPERVISOR.items()]
    lines += ["", "[pools.alpha]", "workers = 1"]
    for name, (url, queues) in databases.items():
        lines += [
            "",
            f"[databases.{name}]",
            f'url = "{url}"',
            f"queues = {queues!r}".replace("'", '"'),
        ]
        for queue in queues:
            lines += ["", f"[pools.{queue}]", "workers = 1"]
    return "\n".join(lines) + "\n" + extra


@pytest.fixture
def several(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(text: str, env: dict[str, str] | None = None) -> Daemon:
        daemon = Daemon(tmp_path, "sqlite:///unused", name=f"several{len(made)}", env=env)
        daemon.write_module(MODULE, HANDLERS)
        daemon.write_config(text=text)
        made.append(daemon)
        return daemon.start()

    yield make
    for daemon in made:
        daemon.kill_all()


def masters(daemon: Daemon) -> dict[str, int]:
    """database name -> pid of its master, from the titles ("forkq: master [NAME]")."""
    found = {}
    for kid in daemon.children():
        title = title_of(kid)
        if title.startswith("forkq: master [") and title.endswith("]"):
            found[title[len("forkq: master [") : -1]] = kid.pid
    return found


def pool_workers(daemon: Daemon) -> dict[str, int]:
    """pool -> how many idle workers, over every master."""
    counts: dict[str, int] = {}
    for pid in masters(daemon).values():
        with contextlib.suppress(psutil.Error):
            for pool, count in pool_workers_of(pid).items():
                counts[pool] = counts.get(pool, 0) + count
    return counts


def wait_serving(daemon: Daemon, names: set[str], pools: set[str]) -> dict[str, int]:
    def up() -> dict[str, int] | None:
        assert daemon.alive(), daemon.describe()
        found = masters(daemon)
        return found if set(found) == names and set(pool_workers(daemon)) >= pools else None

    return wait_until(up, timeout=30, interval=0.1, message=f"masters {names}, pools {pools}")


def records(path: Path) -> list[tuple[int, str, int, int]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        job, queue, pid, ppid = line.split(",")
        rows.append((int(job), queue, int(pid), int(ppid)))
    return rows


def enqueue(url: str, queue: str, count: int, file: Path) -> list[int]:
    q = Queue(url, wake=False)
    try:
        return [q.enqueue("m.where", {"file": str(file)}, queue=queue).id for _ in range(count)]
    finally:
        q.close()


def test_each_pool_drains_only_its_own_database(
    pair: tuple[str, str],
    several: Callable[..., Daemon],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    home, other = pair
    log = tmp_path / "ran.txt"
    beat = tmp_path / "beat.txt"
    hook = Webhook()
    request.addfinalizer(hook.close)
    extra = f"""
[schedules.tick]
cron = "* * * * * */1"
handler = "m.beat"
payload = {{ file = "{beat}" }}

[alerts]
webhook_url = "{hook.url}"

[alerts.rules.stuck]
max_ready = 1
"""
    text = config_text(home, {"other": (other, ["beta"])}, extra)
    daemon = several(text.replace('queues = ["beta"]', 'queues = ["beta", "stuck"]'))
    pids = wait_serving(daemon, {"default", "other"}, {"alpha", "beta"})
    assert title_of(psutil.Process(daemon.pid)) == "forkq: supervisor"

    alpha = enqueue(home, "alpha", 5, log)
    beta = enqueue(other, "beta", 5, log)
    stray = enqueue(home, "beta", 1, log)  # queue beta lives in `other`: nobody claims it here
    wait_until(lambda: len(records(log)) >= 10, timeout=30, message="10 jobs ran")
    ran = {(job, queue): ppid for job, queue, _, ppid in records(log)}
    assert {ran[j, "alpha"] for j in alpha} == {pids["default"]}
    assert {ran[j, "beta"] for j in beta} == {pids["other"]}
    # The schedule's handler is registered on queue beta: it fires in `other` only.
    wait_until(lambda: records(beat), timeout=30, message="the schedule fired")
    assert {ppid for _, queue, _, ppid in records(beat)} == {pids["other"]}
    assert count_rows(home, "forkq_jobs", "id = ? AND status = 'ready'", stray) == 1
    assert count_rows(home, "forkq_jobs", "handler = ?", ("m.beat",)) == 0
    # Every master registered itself in its own database, and its log names it.
    assert count_rows(home, "forkq_processes", "role = 'master'") == 1
    assert count_rows(other, "forkq_processes", "role = 'master'") == 1
    # No pool works `stuck` (in `other`): its backlog alert names the database.
    q = Queue(other, wake=False)  # the three in one commit: a tick never sees two of them
    q.enqueue_many([{"handler": "m.where", "payload": {"file": str(log)}, "queue": "stuck"}] * 3)
    q.close()
    wait_until(lambda: hook.texts, timeout=30, message="the backlog alert")
    assert hook.texts[0].startswith("[forkq other] "), hook.texts
    assert 'queue "stuck" backlog 3 ready' in hook.texts[0], hook.texts
    started = daemon.events("master_started")
    assert {e.get("database") for e in started} == {"default", "other"}

    # TTIN goes to every master: one more child in every pool of every database.
    daemon.send_signal(signal.SIGTTIN)
    wait_until(
        lambda: pool_workers(daemon) == {"alpha": 2, "beta": 2},
        timeout=30,
        message="a second child in alpha and beta",
    )
    assert daemon.stop(timeout=30) == 0
    assert count_rows(home, "forkq_processes") == 0
    assert count_rows(other, "forkq_processes") == 0
    assert daemon.events("supervisor_stopped")


def test_reload_adds_and_removes_databases_and_a_dead_master_comes_back(
    pair: tuple[str, str], several: Callable[..., Daemon], tmp_path: Path
) -> None:
    home, other = pair
    log = tmp_path / "ran.txt"
    daemon = several(config_text(home, {"other": (other, ["beta"])}))
    first = wait_serving(daemon, {"default", "other"}, {"alpha", "beta"})

    # A bad config on HUP is refused; the masters go on as they were.
    good = daemon.config_path.read_text()
    daemon.write_config(text=good + "\n[databases.default]\nurl = 'x'\nqueues = ['q']\n")
    daemon.send_signal(signal.SIGHUP)
    daemon.wait_event("reload_refused")
    assert masters(daemon) == first

    # `other` leaves the config: its master stops; beta is home's now, and drains there.
    daemon.write_config(
        text=config_text(home, {}).replace(
            "[pools.alpha]", "[pools.beta]\nworkers = 1\n\n[pools.alpha]"
        )
        + '\n[databases.spare]\nurl = "'
        + other
        + '"\nqueues = ["gamma"]\n[pools.gamma]\nworkers = 1\n'
    )
    daemon.send_signal(signal.SIGHUP)
    now = wait_serving(daemon, {"default", "spare"}, {"alpha", "beta", "gamma"})
    assert now["default"] == first["default"]
    beta = enqueue(home, "beta", 2, log)
    gamma = enqueue(other, "gamma", 2, log)
    wait_until(lambda: len(records(log)) >= 4, timeout=30, message="4 jobs ran")
    ran = {(job, queue): ppid for job, queue, _, ppid in records(log)}  # ids are per database
    assert {ran[j, "beta"] for j in beta} == {now["default"]}
    assert {ran[j, "gamma"] for j in gamma} == {now["spare"]}

    # A master killed -9 is started again; its database's queues drain again.
    os.kill(now["spare"], signal.SIGKILL)
    daemon.wait_event("master_exited", where=lambda e: e.get("database") == "spare")
    back = wait_serving(daemon, {"default", "spare"}, {"gamma"})
    assert back["spare"] != now["spare"] and back["default"] == now["default"]
    more = enqueue(other, "gamma", 2, log)
    wait_until(lambda: len(records(log)) >= 6, timeout=30, message="2 more jobs ran")
    ran = {(job, queue): ppid for job, queue, _, ppid in records(log)}
    assert {ran[j, "gamma"] for j in more} == {back["spare"]}

    # The supervisor killed -9: each master is told (SIGTERM) and stops as at a stop.
    os.kill(daemon.pid, signal.SIGKILL)
    for pid in back.values():
        wait_until(lambda pid=pid: not psutil.pid_exists(pid), timeout=30, message="masters gone")
    assert count_rows(home, "forkq_processes", "role = 'master'") == 0
    assert count_rows(other, "forkq_processes", "role = 'master'") == 0


def test_a_database_that_does_not_answer_stops_only_its_own_queues(
    pair: tuple[str, str], several: Callable[..., Daemon], tmp_path: Path
) -> None:
    home, _ = pair
    log = tmp_path / "ran.txt"
    port = free_tcp_port()  # nothing listens there: every connection is refused
    down = f"mysql://forkq:forkq@127.0.0.1:{port}/nowhere"
    listen = f"127.0.0.1:{free_tcp_port()}"
    daemon = several(
        config_text(home, {"other": (down, ["beta"])}, f'\n[metrics]\nlisten = "{listen}"\n')
    )
    wait_serving(daemon, {"default", "other"}, {"alpha"})
    daemon.wait_event("db_unreachable", where=lambda e: e.get("database") == "other")
    jobs = enqueue(home, "alpha", 3, log)
    wait_until(lambda: len(records(log)) >= 3, timeout=30, message="home's jobs ran")
    assert {job for job, *_ in records(log)} == set(jobs)

    # One metrics port for the host: pool series carry their database; /healthz says each.
    def scrape(path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{listen}{path}", timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()
        except OSError as exc:  # not listening (yet)
            return 0, str(exc)

    def labelled() -> str | None:
        _, text = scrape("/metrics")
        return text if 'forkq_pool_max_workers{database="default",pool="alpha"}' in text else None

    text = wait_until(labelled, timeout=30, message="labelled pool series")
    # The database that does not answer counts its failed calls under its own name.
    errors = [
        x for x in text.splitlines() if x.startswith('forkq_db_errors_total{database="other"}')
    ]
    assert errors and float(errors[0].split()[-1]) >= 1, text
    assert 'forkq_master_loop_timestamp_seconds{database="default"}' in text

    def judged() -> tuple[int, str] | None:
        answer = scrape("/healthz")
        return answer if "default: ok" in answer[1] else None

    status, health = wait_until(judged, timeout=30, message="/healthz judged default")
    assert status == 503 and "other: " in health, health
    # The port's server is the supervisor's child, and says so (not a master's).
    servers = [title_of(kid) for kid in psutil.Process(daemon.pid).children()]
    assert "forkq: supervisor metrics" in servers and "forkq: master metrics" not in servers

    # HUP with [metrics] listen moved: the one server moves; the masters go on.
    listen = f"127.0.0.1:{free_tcp_port()}"
    daemon.write_config(
        text=config_text(home, {"other": (down, ["beta"])}, f'\n[metrics]\nlisten = "{listen}"\n')
    )
    daemon.send_signal(signal.SIGHUP)
    wait_until(labelled, timeout=30, message="the server on its new port")
    assert daemon.stop(timeout=30) == 0


# The notify fixture: the socket's path, and `heard(until)` over the messages so far.
Notify = tuple[str, Callable[[Callable[[list[str]], bool]], list[str]]]


@pytest.fixture
def notify() -> Iterator[Notify]:
    """A socket standing in for systemd's: its path, and `heard(until)` over what came."""
    directory = tempfile.mkdtemp(prefix="fq-notify-")
    path = os.path.join(directory, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.5)
    messages: list[str] = []

    def heard(what: Callable[[list[str]], bool]) -> list[str]:
        def done() -> list[str] | None:
            with contextlib.suppress(TimeoutError):
                messages.extend(sock.recv(4096).decode().split("\n"))
            return messages if what(messages) else None

        return wait_until(done, timeout=40, interval=0, message=f"sd_notify: {messages!r}")

    yield path, heard
    sock.close()
    shutil.rmtree(directory, ignore_errors=True)


def test_systemd_hears_the_supervisor_only_once_every_master_is_up_or_waiting(
    pair: tuple[str, str],
    several: Callable[..., Daemon],
    notify: Notify,
) -> None:
    home, _ = pair
    path, heard = notify
    down = f"mysql://forkq:forkq@127.0.0.1:{free_tcp_port()}/nowhere"
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"}
    daemon = several(config_text(home, {"other": (down, ["beta"])}), env)
    # `other` never answers: READY comes once home's master is up and other's waits.
    heard(lambda m: "READY=1" in m)
    heard(lambda m: any("default: " in x and "other: waiting" in x for x in m))
    # The masters ping the supervisor, which pings systemd (WatchdogSec=2) on and on
    # while `other` waits: 8 pings, 8 s and more, must not restart `default` with it,
    # nor is `other`, which has no loop yet, taken for a master that stopped.
    heard(lambda m: m[m.index("READY=1") :].count("WATCHDOG=1") >= 8)
    assert masters(daemon).keys() == {"default", "other"}
    assert daemon.events(events.MASTER_UNRESPONSIVE) == []
    daemon.send_signal(signal.SIGTERM)
    heard(lambda m: "STOPPING=1" in m)
    assert daemon.wait_exit(30) == 0


def test_a_master_that_stops_pinging_is_restarted_alone_and_the_unit_lives_on(
    pair: tuple[str, str],
    several: Callable[..., Daemon],
    notify: Notify,
    tmp_path: Path,
) -> None:
    """The supervisor is each master's watchdog: one whose loop stops (SIGSTOP here, a
    hang in life) is killed and started again, while the other database's master goes
    on and systemd keeps hearing WATCHDOG=1, so it never restarts the whole unit."""
    home, other = pair
    path, heard = notify
    env = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "2000000"}
    daemon = several(config_text(home, {"other": (other, ["beta"])}), env)
    before = wait_serving(daemon, {"default", "other"}, {"alpha", "beta"})
    heard(lambda m: "READY=1" in m)
    os.kill(before["other"], signal.SIGSTOP)
    [event] = daemon.wait_event(events.MASTER_UNRESPONSIVE, timeout=30)
    assert event["database"] == "other" and event["master_pid"] == before["other"], event
    pings = len(heard(lambda m: True))
    after = wait_serving(daemon, {"default", "other"}, {"alpha", "beta"})
    assert after["other"] != before["other"] and after["default"] == before["default"]
    assert not psutil.pid_exists(before["other"]) or (
        psutil.Process(before["other"]).status() == psutil.STATUS_ZOMBIE
    )
    heard(lambda m: m[pings:].count("WATCHDOG=1") >= 3)  # the unit's pings went on
    log = tmp_path / "ran.txt"
    jobs = enqueue(other, "beta", 2, log)  # the new master's pool works its database
    wait_until(lambda: len(records(log)) >= 2, timeout=30, message="other's jobs ran")
    assert {job for job, *_ in records(log)} == set(jobs)
    assert daemon.stop(timeout=30) == 0


def test_one_master_refuses_a_reload_that_adds_databases(
    pair: tuple[str, str], several: Callable[..., Daemon]
) -> None:
    home, other = pair
    daemon = several(config_text(home, {}))
    wait_until(lambda: pool_workers_of(daemon.pid) == {"alpha": 1}, timeout=30, message="alpha up")
    assert title_of(psutil.Process(daemon.pid)) == "forkq: master"  # no supervisor: as before
    [started] = daemon.events("master_started")  # its fields as before [databases] came
    assert started["database"] == parse_database_url(home).redacted() and "url" not in started
    daemon.write_config(text=config_text(home, {"other": (other, ["beta"])}))
    daemon.send_signal(signal.SIGHUP)
    refused = daemon.wait_event("reload_refused")
    assert "restart the daemon" in refused[0]["error"]
    assert daemon.stop(timeout=30) == 0


def pool_workers_of(master: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kid in psutil.Process(master).children():
        with contextlib.suppress(psutil.Error):
            title = title_of(kid)
            if " worker " in title and title.endswith(" idle"):
                counts[title.split()[1]] = counts.get(title.split()[1], 0) + 1
    return counts
