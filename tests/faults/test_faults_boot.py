"""A daemon started before its MariaDB answers (after a host reboot, systemd often starts
forkq first): the master waits for the server, one log line a try, and comes up once it
answers, never a crash (issue 21.16). Against a private MariaDB (private_mariadb.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_util import Daemon, record_ids
from private_mariadb import (  # noqa: F401 - fixtures
    PrivateMariaDB,
    private_db_url,
    private_mariadb,
)
from util import wait_until

from supervisor import Queue, events

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


def test_a_daemon_started_before_its_database_waits_for_it_and_runs_jobs(
    daemons: Callable[..., Daemon],
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    record = tmp_path / "record.txt"
    private_mariadb.stop()  # the host rebooted; the database is not up yet
    daemon = daemons(private_db_url).start()
    daemon.wait_event(events.DB_UNREACHABLE, timeout=30)
    assert daemon.alive(), daemon.describe()
    private_mariadb.start()
    daemon.wait_ready(timeout=60)
    job_id = Queue(private_db_url).enqueue("t.record", {"file": str(record)}, queue="work")
    wait_until(lambda: record_ids(record) == [job_id], timeout=30, message="the job ran")
    assert not daemon.events(events.MASTER_CRASHED)
    assert daemon.stop() == 0, daemon.describe()
