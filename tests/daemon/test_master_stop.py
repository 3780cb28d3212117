"""The master while children are asked to go: a child that ignores SIGTERM is still
replaced on HUP, and a graceful stop waits without spinning a core."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from daemon_util import Daemon
from util import wait_until

from supervisor import Queue, events

pytestmark = pytest.mark.slow

IGNORE_TERM = """
import signal

from supervisor import handler


@handler("t.ignore_term")
def ignore_term(payload, job):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a careless library does this
"""


@pytest.fixture
def daemon(tmp_path: Path, sqlite_db_url: str) -> Iterator[Daemon]:
    made = Daemon(
        tmp_path,
        sqlite_db_url,
        pools={"work": {"workers": 1, "timeout": 30}},
        supervisor={"handlers": ["testhandlers", "ignoreterm"], "shutdown_timeout": 3},
    )
    made.write_module("ignoreterm", IGNORE_TERM)
    yield made
    made.kill_all()


def test_hup_replaces_a_child_that_ignores_sigterm(daemon: Daemon, sqlite_db_url: str) -> None:
    daemon.start().wait_ready()
    queue = Queue(sqlite_db_url)
    job_id = queue.enqueue("t.ignore_term", {}, queue="work")
    wait_until(lambda: queue.get(job_id) is None, timeout=10, message="the job done")
    queue.close()
    [deaf] = daemon.pool_children("work")

    daemon.send_signal(signal.SIGHUP)
    # shutdown_timeout (3 s) is what a retiring child gets; then it is killed.
    wait_until(
        lambda: daemon.pool_children("work") and deaf not in daemon.pool_children("work"),
        timeout=15,
        message="the deaf child replaced",
    )
    assert len(daemon.pool_children("work")) == 1
    assert daemon.events(events.CHILD_IGNORED_RETIRE, child_pid=deaf)
    assert daemon.stop() == 0, daemon.describe()


def test_a_graceful_stop_waits_without_spinning(daemon: Daemon, sqlite_db_url: str) -> None:
    daemon.write_config(supervisor={"shutdown_timeout": 20})
    daemon.start().wait_ready()
    queue = Queue(sqlite_db_url)
    job_id = queue.enqueue("t.sleep", {"seconds": 6}, queue="work")
    wait_until(
        lambda: any(f" job {job_id} " in t for t in daemon.child_titles().values()),
        timeout=10,
        message="the job running",
    )
    queue.close()
    master = psutil.Process(daemon.pid)
    before = master.cpu_times()
    daemon.send_signal(signal.SIGTERM)
    time.sleep(4)  # the job still runs: the master only waits
    used = sum(master.cpu_times()[:2]) - sum(before[:2])
    assert daemon.wait_exit(20) == 0
    # Waiting is sleeping: a spinning loop burned 1.2 s of CPU here (the check and beat timers stayed due), a sleeping one ~0.
    print(f"\n[figures] graceful stop: master CPU {used:.3f} s in 4 s")
    assert used < 0.5, f"the master used {used:.2f} s of CPU in 4 s of graceful stop"
