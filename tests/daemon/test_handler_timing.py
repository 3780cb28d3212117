"""Per-handler timing: a real daemon's children tally each attempt (no query per job),
its heartbeats add them to forkq_handler_stats per minute, handler and host, and the
percentiles read back are those of the handlers' real durations."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_util import Daemon
from util import subprocess_env, wait_until

from supervisor import Queue
from supervisor.store import Store
from supervisor.timing import Stats, merge


@pytest.fixture
def daemon(tmp_path: Path, db_url: str) -> Iterator[Daemon]:
    made = Daemon(tmp_path, db_url, pools={"work": {"workers": 2}})
    yield made
    made.kill_all()


def forkq_status(db_url: str, *args: str) -> str:
    env = subprocess_env(db_url)
    env.pop("FORKQ_CONFIG", None)
    run = [sys.executable, "-m", "supervisor", "status", *args, "--database", db_url]
    return subprocess.run(run, env=env, capture_output=True, text=True, check=True).stdout


def jobs_per_handler(store: Store) -> dict[str, Stats]:
    return merge(store.handler_stats(3600))


def test_each_handler_gets_its_counts_failure_rate_and_percentiles(
    daemon: Daemon, db_url: str, store: Store
) -> None:
    daemon.start().wait_ready()
    queue = Queue(db_url)
    try:
        queue.enqueue_many([{"handler": "t.noop", "payload": {}, "queue": "work"}] * 20)
        slow = [{"handler": "t.sleep", "payload": {"seconds": 0.05}, "queue": "work"}] * 9
        slow.append({"handler": "t.sleep", "payload": {"seconds": 0.6}, "queue": "work"})
        queue.enqueue_many(slow)
        for _ in range(4):
            queue.enqueue("t.fail", {}, queue="work", max_attempts=1)  # dead at once
    finally:
        queue.close()
    expected = {"t.noop": 20, "t.sleep": 10, "t.fail": 4}
    wait_until(
        lambda: {h: s.jobs for h, s in jobs_per_handler(store).items()} == expected,
        timeout=30,
        message=f"the handler rows written ({daemon.describe()})",
    )
    stats = jobs_per_handler(store)
    noop, sleep, fail = stats["t.noop"], stats["t.sleep"], stats["t.fail"]
    assert (noop.failed, sleep.failed, fail.failed) == (0, 0, 4)
    assert fail.failure_rate == 1.0 and noop.failure_rate == 0.0
    # Durations are the handler's own: sleep(0.05) nine times, sleep(0.6) once.
    assert sleep.fastest is not None and 0.05 <= sleep.fastest < 0.5
    assert sleep.slowest is not None and 0.6 <= sleep.slowest < 5
    assert 0.05 <= (sleep.percentile(0.5) or 0) < 0.128  # within the [64 ms, 128 ms) bucket
    assert (sleep.percentile(0.95) or 0) >= 0.128  # the slow one shows at the tail
    assert (noop.percentile(0.95) or 1) < (sleep.percentile(0.5) or 0)
    assert sleep.seconds >= 9 * 0.05 + 0.6
    assert daemon.stop() == 0, daemon.describe()
    after = jobs_per_handler(store)
    assert {h: s.jobs for h, s in after.items()} == expected  # nothing counted twice
    series = store.handler_series("t.sleep", 3600)
    assert sum(s.jobs for _, s in series) == 10 and all(m % 60 == 0 for m, _ in series)
    # `forkq status` (and /api/status, the same document) has the last hour per handler.
    document = json.loads(forkq_status(db_url, "--json"))["handlers"]
    assert [(h["handler"], h["attempts"]) for h in document] == sorted(
        expected.items(), key=lambda item: -item[1]
    )
    assert [h["failure_rate"] for h in document if h["handler"] == "t.fail"] == [1.0]
    text = forkq_status(db_url)
    assert "handlers, the last hour:" in text
    row = next(line for line in text.splitlines() if line.startswith("t.fail"))
    assert row.split()[1:4] == ["4", "4", "100.0%"]


def test_a_job_finished_during_the_drain_is_timed_and_counted(
    tmp_path: Path, db_url: str, store: Store
) -> None:
    """A stop writes what the last heartbeat had not: an attempt that ends after it (in
    the drain, or just before the signal) is in forkq_handler_stats and forkq_throughput,
    so a restart or a deploy loses no figure."""
    # Heartbeats far apart: whatever is written here is written by the stop.
    made = Daemon(
        tmp_path, db_url, pools={"work": {"workers": 1}}, supervisor={"heartbeat_interval": 60}
    )
    try:
        made.start().wait_ready()
        queue = Queue(db_url)
        try:
            job_id = queue.enqueue("t.sleep", {"seconds": 1}, queue="work")
        finally:
            queue.close()
        # Its handler started (the child's title says so): a stop that came between the
        # claim and the start would hand the job back unrun, with nothing to time.
        wait_until(
            lambda: made.running(job_id),
            timeout=20,
            message=f"job {job_id} running ({made.describe()})",
        )
        assert made.stop() == 0, made.describe()
    finally:
        made.kill_all()
    assert {h: s.jobs for h, s in jobs_per_handler(store).items()} == {"t.sleep": 1}
    assert [(t.queue, t.done, t.failed) for t in store.throughput(3600)] == [("work", 1, 0)]
