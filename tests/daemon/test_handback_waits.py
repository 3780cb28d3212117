"""A hand-back the database cannot take yet waits for it (SQLite): a job's handler holds the
file's write lock in its own transaction (an application's long transaction) while the
master hands back the success the child had not written. The master's writes wait for the
lock; the success is written once it is free, and no job runs twice. (It was dropped after
five loop turns the breaker skipped, `hand_back_dropped`: the success stayed held until its
lease ran out, minutes later, and then ran again.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_util import Daemon
from util import wait_until

from supervisor import Queue, events
from supervisor.store import open_store

HOLDER = '''
import sqlite3
import time

from supervisor import handler


@handler("hold.write_lock")
def hold(payload, job):
    """An application's long write transaction on the queue's own SQLite file."""
    conn = sqlite3.connect(payload["path"], isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    time.sleep(float(payload["seconds"]))
    conn.execute("COMMIT")
    conn.close()
'''


@pytest.fixture
def daemon(tmp_path: Path, sqlite_db_url: str) -> Iterator[Daemon]:
    made = Daemon(tmp_path, sqlite_db_url, pools={"default": {"workers": 1}})
    made.write_module("holder", HOLDER)
    made.write_config(supervisor={"handlers": [*made.supervisor["handlers"], "holder"]})
    yield made
    made.kill_all()


def test_a_hand_back_waits_for_a_write_lock_an_application_holds(
    daemon: Daemon, sqlite_db_url: str, tmp_path: Path
) -> None:
    queue = Queue(store=open_store(sqlite_db_url))
    runs = tmp_path / "runs.txt"
    # The child claims one job, then two: the second record and the holder behind it. It
    # runs the record (its success unwritten: claims write successes with the next claim),
    # then the holder; the master takes that success back while the lock is held.
    records = [queue.enqueue("t.record", {"file": str(runs)}) for _ in range(2)]
    path = sqlite_db_url.removeprefix("sqlite:///")
    holder = queue.enqueue("hold.write_lock", {"path": path, "seconds": 4})
    daemon.start()
    wait_until(
        lambda: all(queue.store.get_job(j.id) is None for j in [*records, holder]),
        timeout=30,
        message="every job done (the held-back success written once the lock was free)",
    )
    ran = [int(line.split(",")[0]) for line in runs.read_text().splitlines()]
    assert sorted(ran) == sorted(j.id for j in records), "a record ran twice or not at all"
    assert daemon.events("jobs_handed_back", behind=holder.id), daemon.describe()
    assert not daemon.events(events.HAND_BACK_DROPPED), daemon.describe()
    assert daemon.stop() == 0, daemon.describe()
