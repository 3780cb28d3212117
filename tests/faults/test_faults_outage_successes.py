"""A worker that finished a job while the database was away writes its success as soon as
the database answers again: the master, which notices first, wakes every child, so a
child in a back-off (10 s and more by then) tries at once. Before, it slept its back-off
out while the job's lease ran to its end, and the lease reaper gave the job to another
run (a QA run: 2 of 6 jobs ran twice after a 42 s outage, shorter than their lease).
On a private MariaDB, killed -9 and started again."""

from __future__ import annotations

import signal
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from daemon_util import Daemon, count_lines, record_ids
from private_mariadb import PrivateMariaDB, private_db_url, private_mariadb  # noqa: F401
from util import wait_until

from supervisor import Queue, events

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

QUEUE = "work"
TIMEOUT = 8  # the job's lease: timeout + 30 s after its claim
OUTAGE = 26.0  # seconds from the claim: the worker's back-off reaches its longest (10 s)


def at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def one_job_running(daemons: Any, url: str, record: Path, **supervisor: Any) -> tuple[Daemon, int]:
    """A daemon of one worker running one 1 s `t.record` job (which appends to `record`)."""
    daemon: Daemon = daemons(
        url, pools={QUEUE: {"workers": 1, "timeout": TIMEOUT}}, supervisor=supervisor
    )
    daemon.start().wait_ready()
    queue = Queue(url)
    job = queue.enqueue("t.record", {"file": str(record), "seconds": 1.0}, queue=QUEUE)
    queue.close()
    wait_until(lambda: daemon.running(job), timeout=20, message="the job running")
    return daemon, job


def jobs_left(private_mariadb: PrivateMariaDB) -> int:  # noqa: F811
    table = f"`{private_mariadb.database}`.forkq_jobs"
    return int(private_mariadb.admin(f"SELECT COUNT(*) FROM {table}")[0][0])


def test_a_success_held_through_an_outage_is_written_when_it_ends_and_runs_once(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    daemons: Any,
    tmp_path: Path,
) -> None:
    record = tmp_path / "record.csv"
    # (the lease reaper looks every second)
    daemon, job = one_job_running(daemons, private_db_url, record, check_interval=1)
    claimed = time.monotonic()
    private_mariadb.kill9()
    wait_until(lambda: count_lines(record) == 1, timeout=20, message="the job ran in the outage")
    time.sleep(max(0.0, claimed + OUTAGE - time.monotonic()))  # the outage itself
    private_mariadb.start()
    wait_until(
        lambda: jobs_left(private_mariadb) == 0,
        timeout=60,
        message=f"its success written ({daemon.describe()})",
    )
    # Past the lease's end and a few reaper looks: it never ran again.
    time.sleep(max(0.0, claimed + TIMEOUT + 30 + 4 - time.monotonic()))
    assert record_ids(record) == [job], daemon.describe()
    assert not daemon.events(events.LEASE_LOST), daemon.describe()
    # The worker came back with the master, not a back-off later.
    [back] = daemon.events(events.DB_REACHABLE_AGAIN)
    reconnected = [e for e in daemon.events(events.DB_RECONNECTED) if e.get("role") == "worker"]
    assert reconnected and at(reconnected[0]) - at(back) < 5.0, (back, reconnected)
    assert daemon.stop() == 0, daemon.describe()


def test_a_stop_during_a_short_outage_writes_the_successes_its_children_hold(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    daemons: Any,
    tmp_path: Path,
) -> None:
    """TERM while the database is away: a child's job ends, its write fails, and it tries
    again (the master waits for it up to shutdown_timeout) until the database is back, so
    the job is done once, not left running for the next daemon to run again."""
    record = tmp_path / "record.csv"
    daemon, job = one_job_running(daemons, private_db_url, record, shutdown_timeout=40)
    private_mariadb.kill9()
    daemon.send_signal(signal.SIGTERM)
    wait_until(lambda: count_lines(record) == 1, timeout=20, message="the job ran in the outage")
    time.sleep(3.0)  # the outage itself, well inside shutdown_timeout
    private_mariadb.start()
    assert daemon.wait_exit(timeout=60) == 0, daemon.describe()
    assert jobs_left(private_mariadb) == 0, daemon.describe()
    assert record_ids(record) == [job]
