"""The dashboard's per-minute counts: each master adds its children's finished jobs to
forkq_throughput (one row per minute, queue and host) every heartbeat, from the
scoreboard, without a query per job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_util import Daemon
from util import sql, wait_until

from supervisor import Queue


@pytest.fixture
def daemon(tmp_path: Path, db_url: str) -> Iterator[Daemon]:
    made = Daemon(tmp_path, db_url, pools={"work": {"workers": 2}, "other": {"workers": 1}})
    yield made
    made.kill_all()


def totals(db_url: str) -> dict[str, tuple[int, int]]:
    rows = sql(db_url, "SELECT queue, SUM(done), SUM(failed) FROM forkq_throughput GROUP BY queue")
    return {str(queue): (int(done), int(failed)) for queue, done, failed in rows}


def test_finished_jobs_are_counted_per_queue_and_minute(daemon: Daemon, db_url: str) -> None:
    daemon.start().wait_ready()
    queue = Queue(db_url)
    try:
        queue.enqueue_many([{"handler": "t.noop", "payload": {}, "queue": "work"}] * 30)
        queue.enqueue_many([{"handler": "t.noop", "payload": {}, "queue": "other"}] * 5)
        for _ in range(4):
            queue.enqueue("t.fail", {}, queue="work", max_attempts=1)  # dead at once
    finally:
        queue.close()
    wait_until(
        lambda: totals(db_url) == {"work": (30, 4), "other": (5, 0)},
        timeout=30,
        message=f"the counts written ({daemon.describe()})",
    )
    [(hosts,)] = sql(db_url, "SELECT COUNT(DISTINCT host) FROM forkq_throughput")
    assert int(hosts) == 1
    assert daemon.stop() == 0, daemon.describe()
    assert totals(db_url) == {"work": (30, 4), "other": (5, 0)}  # nothing counted twice
