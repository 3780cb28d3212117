"""pytest itself killed mid-test (a CI timeout's SIGKILL, pytest-timeout's `os._exit`, a
Ctrl-\\): no fixture's teardown runs, yet what the test started must not outlive it.

Each test runs a small pytest of its own in a subprocess: a test file in tmp_path that
starts the real launchers (tests/daemon_util.py's `daemons` fixture, tests/private_mariadb.py's
`private_mariadb`), writes down every process below it (pid and start time) once they are
up, and sleeps. Then that pytest is SIGKILLed, and every process it wrote down must be
gone within GONE_WITHIN seconds: the launchers tie each program to pytest with the
parent-death signal (util.dies_with_us).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from private_mariadb import binaries_missing, unavailable
from util import REPO_ROOT, backend_of, dies_with_us, report_figures, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

GONE_WITHIN = 15.0  # seconds from pytest's death to the last of its processes gone
UP_WITHIN = 120.0  # seconds for the inner pytest to have everything up (a private server)

# What every inner test file starts with: `record()` writes down every live process
# below this pytest, then the test sleeps until it is killed.
PRELUDE = """
import json
import os
import time

import psutil
import pytest
from util import wait_until


def record():
    found = {}
    for process in psutil.Process().children(recursive=True):
        try:
            found[process.pid] = [process.create_time(), " ".join(process.cmdline()).strip()]
        except psutil.Error:
            continue
    path = os.environ["FORKQ_INNER_RECORD"]
    with open(path + ".tmp", "w") as out:
        json.dump(found, out)
    os.replace(path + ".tmp", path)


def sleep_until_killed():
    time.sleep(600)
"""

# A daemon of the `daemons` fixture with a job running that ignores its soft timeout (a
# drain would wait the whole shutdown_timeout for it), on the outer test's database.
DAEMON_TEST = (
    PRELUDE
    + """
from daemon_util import daemons_fixture  # noqa: F401

from supervisor import Queue


@pytest.fixture
def db_url():
    return os.environ["FORKQ_INNER_DB_URL"]


def test_a_daemon_runs_a_hung_job_while_pytest_sleeps(daemons, db_url):
    daemon = daemons(pools={"work": {"workers": 2}}, supervisor={"shutdown_timeout": 60})
    daemon.start().wait_ready()
    queue = Queue(db_url)
    job_id = queue.enqueue("t.hang", {}, queue="work")
    queue.close()
    wait_until(lambda: daemon.running(job_id), timeout=30, message="the job running")
    record()
    sleep_until_killed()
"""
)

# The fault suite's private server (module fixture), and a daemon on it: both get their
# signal at once, so the daemon stops while its database goes away.
MARIADB_TEST = (
    PRELUDE
    + """
from daemon_util import Daemon
from private_mariadb import private_mariadb  # noqa: F401


def test_a_private_server_and_a_daemon_on_it_while_pytest_sleeps(private_mariadb, tmp_path):
    daemon = Daemon(tmp_path / "daemon", private_mariadb.url, pools={"work": {"workers": 2}})
    daemon.start().wait_ready()
    record()
    sleep_until_killed()
"""
)


def alive(pid: int, created: float) -> bool:
    """The process we wrote down still runs (not its pid reused, not a zombie)."""
    try:
        process = psutil.Process(pid)
        return process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def survivors(recorded: dict[str, list[Any]]) -> dict[int, str]:
    return {
        int(pid): title for pid, (created, title) in recorded.items() if alive(int(pid), created)
    }


def kill_pytest_midtest(
    tmp_path: Path, source: str, env: dict[str, str], sig: int = signal.SIGKILL
) -> dict[str, list[Any]]:
    """Run `source` in a pytest of its own until it wrote down its processes, then kill
    that pytest with `sig`; what it wrote down ({pid: [start time, command line]})."""
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pytest.ini").write_text("[pytest]\n")  # none of the repository's options
    (inner / "test_inner.py").write_text(source)
    record = tmp_path / "processes.json"
    log = tmp_path / "inner.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "tests"), str(REPO_ROOT)]),
        "FORKQ_INNER_RECORD": str(record),
        **env,
    }
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += [f"--basetemp={tmp_path / 'basetemp'}", str(inner / "test_inner.py")]
    with open(log, "wb") as out:
        pytest_proc = subprocess.Popen(
            command,
            cwd=inner,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dies_with_us(signal.SIGKILL),
        )
    try:

        def up() -> bool:
            if pytest_proc.poll() is not None:
                raise AssertionError(f"the inner pytest exited:\n{log.read_text()[-3000:]}")
            return record.exists()

        wait_until(up, timeout=UP_WITHIN, interval=0.1, message="the inner test's processes")
        recorded: dict[str, list[Any]] = json.loads(record.read_text())
    finally:
        pytest_proc.send_signal(sig)  # pytest handles no SIGTERM: no teardown runs either
        pytest_proc.wait(timeout=10)
        pytest_proc.kill()  # if the signal was not the end of it
    return recorded


def assert_all_gone(recorded: dict[str, list[Any]], name: str) -> None:
    """Every recorded process ends within GONE_WITHIN seconds; whatever survives is
    SIGKILLed here, pass or fail (they are this test's: nothing may outlive it)."""
    died = time.monotonic()
    try:
        wait_until(lambda: not survivors(recorded), timeout=GONE_WITHIN, interval=0.1)
    except AssertionError:
        left = sorted(survivors(recorded).values())
        raise AssertionError(
            f"{len(left)} of {len(recorded)} processes still ran {GONE_WITHIN:g}s after"
            f" their pytest was killed: {left}"
        ) from None
    finally:
        for pid in survivors(recorded):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    report_figures(name, processes=len(recorded), gone_after_s=round(time.monotonic() - died, 2))


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["KILL", "TERM"])
def test_a_killed_pytest_takes_its_daemon_and_the_daemons_children_down(
    tmp_path: Path, db_url: str, sig: int
) -> None:
    env = {"FORKQ_INNER_DB_URL": db_url}
    recorded = kill_pytest_midtest(tmp_path, DAEMON_TEST, env, sig)
    assert_all_gone(
        recorded, f"daemon on {backend_of(db_url)}, pytest sent {signal.Signals(sig).name}"
    )
    titles = [title for _, title in recorded.values()]  # what was gone was what we meant
    assert "forkq: master" in titles, titles
    assert len([t for t in titles if t.startswith("forkq: work worker ")]) == 2, titles
    assert any(" job " in title for title in titles), titles  # the hung job's child


def test_a_killed_pytest_takes_its_private_mariadb_and_a_daemon_on_it_down(
    tmp_path: Path,
) -> None:
    missing = binaries_missing()
    if missing:
        unavailable(f"private MariaDB: {missing}")
    recorded = kill_pytest_midtest(tmp_path, MARIADB_TEST, {})
    assert_all_gone(recorded, "private mariadbd and daemon")
    titles = [title for _, title in recorded.values()]
    assert any(title.split()[0].endswith("/mariadbd") for title in titles), titles
    assert "forkq: master" in titles, titles
