"""Several databases (issue 24, items 2 and 3): two independent private MariaDB primaries
as two databases of one config (tests/private_databases.py): the home database on
server 1 (queue "work"), `[databases.reports]` on server 2 (queue "reports").

- Producers route by queue: `Queue.from_config(path)`, `forkq enqueue --queue` and the
  PHP class given a map of PDOs each put a job in its queue's server, and only there.
- One `forkq run` serves both databases. Server 2 killed -9 mid-drain: server 1's queue
  drains to the end while server 2 is down, `forkq status` shows server 1's queues and
  names server 2 as down; server 2 restarted on its data directory: its queue finishes.
  Every job on both servers ran exactly once.

Job ids are per database, so each database's jobs record their runs in a file of their
own (`t.record`: `id,pid,start,end`, one O_APPEND write per run).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from daemon_util import Daemon, count_lines, record_ids
from php_util import CLIENT, pdo_dsn, php_fixture, php_string  # noqa: F401 - the fixture
from private_databases import REPORTS, TwoDatabases, remaining, rows, two_databases  # noqa: F401
from util import report_figures, wait_until

from supervisor import Queue, events
from supervisor.errors import ConnectionLost

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

HOME_QUEUE, REPORTS_QUEUE = "work", "reports"
POOLS = {  # timeout 5: a claim whose answer died with server 2 comes back in ~35 s
    HOME_QUEUE: {"workers": 2, "timeout": 5},
    REPORTS_QUEUE: {"workers": 2, "timeout": 5},
}


@pytest.fixture
def pair(two_databases: TwoDatabases) -> TwoDatabases:  # noqa: F811
    two_databases.reset()
    return two_databases


@pytest.fixture
def daemon(pair: TwoDatabases, tmp_path: Path) -> Any:
    """`forkq run` configured on both databases (not started); killed, session and all,
    at teardown."""
    made = Daemon(tmp_path / "daemon", pair.home.url, pools=POOLS)
    made.write_config(text=pair.config(made.pools, made.supervisor, [REPORTS_QUEUE]))
    yield made
    made.kill_all()


def forkq(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    """`forkq ARGS -c CONFIG` as a user runs it next to the daemon's config."""
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args, "-c", str(daemon.config_path)],
        env=daemon.environment(),
        cwd=daemon.directory,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def payloads(server: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(str(queue), json.loads(payload)) for _, queue, _, payload in rows(server)]


# --- producers route by queue ----------------------------------------------------------------


def assert_routed(pair: TwoDatabases, via: str, home: int, reports: int) -> None:
    """Server 1 holds `home` jobs of queue "work" sent `via`, server 2 `reports` of queue
    "reports", and nothing else."""
    on_home, on_reports = payloads(pair.home), payloads(pair.reports)
    assert on_home == [(HOME_QUEUE, {"via": via})] * home, on_home
    assert on_reports == [(REPORTS_QUEUE, {"via": via})] * reports, on_reports


def test_python_queue_from_config_routes_by_queue(pair: TwoDatabases, daemon: Daemon) -> None:
    router = Queue.from_config(daemon.config_path)
    try:
        home = router.enqueue("t.noop", {"via": "python"}, queue=HOME_QUEUE)
        reports = router.enqueue("t.noop", {"via": "python"}, queue=REPORTS_QUEUE)
        many = router.enqueue_many(
            [
                {"handler": "t.noop", "payload": {"via": "python"}, "queue": q}
                for q in (REPORTS_QUEUE, HOME_QUEUE, REPORTS_QUEUE)
            ]
        )
    finally:
        router.close()
    assert_routed(pair, "python", home=2, reports=3)
    assert [int(r[0]) for r in rows(pair.home)] == sorted([home, many[1]])
    assert [int(r[0]) for r in rows(pair.reports)] == sorted([reports, many[0], many[2]])
    assert str(reports.ref) == f"{REPORTS}:{int(reports)}" and str(home.ref) == str(int(home))


def test_cli_enqueue_routes_by_queue(pair: TwoDatabases, daemon: Daemon) -> None:
    said = {}
    for queue in (HOME_QUEUE, REPORTS_QUEUE, REPORTS_QUEUE):
        done = forkq(daemon, "enqueue", "--queue", queue, "t.noop", '{"via": "cli"}')
        assert done.returncode == 0, done.stdout + done.stderr
        said.setdefault(queue, []).append(done.stdout.strip())
    assert_routed(pair, "cli", home=1, reports=2)
    assert said[HOME_QUEUE] == [str(rows(pair.home)[0][0])]  # a home job: its plain id
    assert said[REPORTS_QUEUE] == [f"{REPORTS}:{r[0]}" for r in rows(pair.reports)]


def test_php_class_with_a_pdo_per_database_routes_by_queue(
    pair: TwoDatabases, php: str, tmp_path: Path
) -> None:
    pdos = []
    for name, server in (("default", pair.home), (REPORTS, pair.reports)):
        dsn, user, password = pdo_dsn(server.url)
        pdos.append(
            f"{php_string(name)} => new PDO({php_string(dsn)}, {php_string(user)},"
            f" {php_string(password)})"
        )
    script = tmp_path / "route.php"
    script.write_text(
        "<?php\ndeclare(strict_types=1);\n"
        f"require {php_string(str(CLIENT))};\n"
        f"require {php_string(str(CLIENT.with_name('Router.php')))};\n"
        "use Forkq\\Router;\n"
        f"$router = new Router([{', '.join(pdos)}],"
        f" [{php_string(REPORTS)} => [{php_string(REPORTS_QUEUE)}]]);\n"
        "foreach (['work', 'reports', 'reports'] as $queue) {\n"
        "    $id = $router->enqueue('t.noop', ['via' => 'php'], ['queue' => $queue]);\n"
        '    echo $router->ref($queue, $id), "\\n";\n'
        "}\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [php, "-d", "display_errors=stderr", "-d", "error_reporting=-1", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and not done.stderr, done.stdout + done.stderr
    assert_routed(pair, "php", home=1, reports=2)
    home_id, *reports_ids = (int(r[0]) for r in [*rows(pair.home), *rows(pair.reports)])
    assert done.stdout.split() == [str(home_id), *(f"{REPORTS}:{i}" for i in reports_ids)]


# --- one daemon, two databases, server 2 killed -9 mid-drain ---------------------------------


def test_server_2_killed_mid_drain_stops_only_its_queues(
    pair: TwoDatabases, daemon: Daemon, tmp_path: Path
) -> None:
    home_file, reports_file = tmp_path / "home.csv", tmp_path / "reports.csv"
    home_total, reports_total, later = 600, 600, 300

    def job(queue: str, record: Path) -> dict[str, Any]:
        return {"handler": "t.record", "payload": {"file": str(record), "seconds": 0.01},
                "queue": queue}  # fmt: skip

    router = Queue.from_config(daemon.config_path)
    try:
        first = router.enqueue_many([job(HOME_QUEUE, home_file)] * home_total)
        reports = router.enqueue_many([job(REPORTS_QUEUE, reports_file)] * reports_total)
        assert {e.database for e in first} == {"default"} and {e.database for e in reports} == {
            REPORTS
        }
        assert (remaining(pair.home), remaining(pair.reports)) == (home_total, reports_total)

        daemon.start()
        wait_until(
            lambda: count_lines(reports_file) >= reports_total // 4,
            timeout=120,
            interval=0.01,
            message="a quarter of server 2's jobs run",
        )
        pair.reports.kill9()
        killed_at, reports_run_at_kill = time.time(), count_lines(reports_file)
        # The home queue goes on: what was queued, and what is enqueued while server 2 is down;
        # an enqueue into server 2's queue says its database does not answer.
        second = router.enqueue_many([job(HOME_QUEUE, home_file)] * later)
        with pytest.raises(ConnectionLost, match="2003"):
            router.enqueue("t.noop", {}, queue=REPORTS_QUEUE)
    finally:
        router.close()
    home_ids = [int(e) for e in (*first, *second)]
    wait_until(
        lambda: not remaining(pair.home) and count_lines(home_file) >= len(home_ids),
        timeout=120,
        interval=0.2,
        message="server 1 drained while server 2 is down",
    )
    assert not pair.reports.alive()
    assert sorted(record_ids(home_file)) == sorted(home_ids), "server 1: not each job once"
    starts = [float(line.split(",")[2]) for line in home_file.read_text().splitlines()]
    assert sum(1 for start in starts if start > killed_at) >= later, "server 1 stopped too"

    # forkq status: server 1's queues, server 2 named as not answering (exit 1).
    status = forkq(daemon, "status")
    home_heading = f"database default: mysql://forkq:***@127.0.0.1:{pair.home.port}/forkq"
    assert status.returncode == 1, status.stdout + status.stderr
    assert status.stdout.startswith(home_heading + "\n"), status.stdout
    assert [
        line.split()[:2] for line in status.stdout.splitlines() if line.startswith("work ")
    ] == [["work", "0"]], status.stdout
    assert "reports: unreachable: (2003)" in status.stdout, status.stdout
    assert "1 database did not answer: reports" in status.stderr, status.stderr
    assert pair.reports.password not in status.stdout + status.stderr
    # The daemon: only the reports master lost its database.
    unreachable = daemon.events(events.DB_UNREACHABLE)
    assert unreachable and {e.get("database") for e in unreachable} == {REPORTS}, unreachable

    # Server 2 back on its data directory: its queue finishes, nothing lost or run twice.
    pair.reports.start()
    back_at = time.monotonic()
    wait_until(
        lambda: not remaining(pair.reports),
        timeout=150,
        interval=0.2,
        message="server 2's queue finished after its restart",
    )
    daemon.wait_event(
        events.DB_REACHABLE_AGAIN, timeout=60, where=lambda e: e.get("database") == REPORTS
    )
    assert forkq(daemon, "status").returncode == 0  # both databases answer again
    reports_runs = record_ids(reports_file)
    report_figures(
        "two databases, server 2 killed -9",
        home_jobs=len(home_ids),
        reports_jobs=reports_total,
        reports_run_before_kill=reports_run_at_kill,
        reports_finish_after_restart_s=round(time.monotonic() - back_at, 1),
        reports_duplicates=len(reports_runs) - len(set(reports_runs)),
    )
    assert sorted(reports_runs) == sorted(int(e) for e in reports), "server 2: not each job once"
    assert sorted(record_ids(home_file)) == sorted(home_ids)
    assert daemon.alive(), daemon.describe()
    assert not daemon.events(events.JOB_FINISHED, outcome="dead"), "a job died"
    assert daemon.stop() == 0, daemon.describe()
