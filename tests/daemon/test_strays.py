"""What a job leaves behind when its child is SIGKILLed (overtime, shutdown) comes to the
master, its subreaper, which kills it: nothing a job started outlives it, even a process
that escaped the process group with setsid."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from daemon_util import Daemon
from util import wait_until

from supervisor import Queue, events

ESCAPER = """
import subprocess
import time

from supervisor import handler


@handler("t.escape_then_hang")
def escape_then_hang(payload, job):
    sleeper = subprocess.Popen(["setsid", "sleep", "300"])
    with open(payload["file"], "w") as out:
        out.write(str(sleeper.pid))
    while True:  # deaf to the soft timeout: only the master's kill ends it
        try:
            time.sleep(1)
        except BaseException:
            pass
"""


@pytest.fixture
def daemon(tmp_path: Path, sqlite_db_url: str) -> Iterator[Daemon]:
    made = Daemon(
        tmp_path,
        sqlite_db_url,
        pools={"work": {"workers": 1, "timeout": 1}},
        supervisor={"handlers": ["testhandlers", "escaper"]},
    )
    made.write_module("escaper", ESCAPER)
    yield made
    made.kill_all()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_setsid_escape_of_a_killed_job_is_killed_by_the_master(
    daemon: Daemon, sqlite_db_url: str, tmp_path: Path
) -> None:
    daemon.start().wait_ready()
    record = tmp_path / "sleeper.pid"
    queue = Queue(sqlite_db_url)
    try:
        queue.enqueue("t.escape_then_hang", {"file": str(record)}, queue="work", max_attempts=1)
    finally:
        queue.close()
    wait_until(lambda: record.exists() and record.read_text(), timeout=10, message="escaped")
    sleeper = int(record.read_text())
    wait_until(lambda: daemon.events(events.JOB_TIMED_OUT), timeout=15, message="overtime kill")
    wait_until(lambda: gone(sleeper), timeout=15, message=f"the escaped sleep {sleeper} killed")
    assert daemon.events(events.STRAY_KILLED, pid=sleeper)
    assert daemon.stop() == 0, daemon.describe()
