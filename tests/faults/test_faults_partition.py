"""A host cut off from the database (a proxy that goes silent: no refusal, no reset),
against a private MariaDB. Guarantee 2 (one holder at a time) and the outcome of a
job that ended while its worker could not write.

Run with `make test-faults` (`pytest -m faults -s tests/faults/test_faults_partition.py`
prints the figures).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from daemon_util import Daemon, record_ids, render_config
from private_mariadb import (  # noqa: F401 - fixtures
    Partition,
    PrivateMariaDB,
    Webhook,
    private_db_url,
    private_mariadb,
)
from util import report_figures, unavailable, wait_until

from supervisor import Queue, events
from supervisor.models import JobState
from supervisor.store import open_store

pytestmark = [pytest.mark.faults, pytest.mark.timeout(240)]

QUEUE = "work"
CLUSTER = {  # stale fast, chores hand over fast: what took a minute takes seconds
    "heartbeat_interval": 0.5,
    "process_stale_after": 2,
    "check_interval": 1,
    "chores_lease": 2,
}

FAIL_LATER = """
import time

from supervisor import handler


@handler("t.fail_after")
def fail_after(payload, job):
    time.sleep(float(payload["seconds"]))
    raise RuntimeError("the handler's own failure")
"""


def via(partition: Partition, server: PrivateMariaDB, url: str) -> str:
    return url.replace(f":{server.port}/", f":{partition.port}/")


def test_a_cut_off_host_keeps_its_job_and_nobody_else_runs_it(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    partition: Partition,
    daemons: Any,
    tmp_path: Path,
) -> None:
    """Cut off for longer than process_stale_after, shorter than the lease: the host
    looks dead, but its job still runs; the chores holder must wait for the lease."""
    pools = {QUEUE: {"workers": 1, "timeout": 20}}  # lease 50 s
    cut_off_url = via(partition, private_mariadb, private_db_url)
    cut_off = daemons(cut_off_url, name="a", pools=pools, supervisor=CLUSTER)
    cut_off.start().wait_ready()
    record = tmp_path / "record"
    queue = Queue(private_db_url)
    job_id = queue.enqueue("t.record", {"file": str(record), "seconds": 12}, queue=QUEUE)
    queue.close()
    wait_until(lambda: cut_off.running(job_id), timeout=10, message="the job running on a")
    healthy = daemons(private_db_url, name="b", pools=pools, supervisor=CLUSTER)
    healthy.start().wait_ready()

    partition.cut()
    store = open_store(private_db_url)
    try:
        # Stale by now, and b holds the chores lease: before the fix it settled the job here.
        time.sleep(8)
        row = store.get_job(job_id)
        assert row is not None and row.status == JobState.RUNNING, row
        assert not healthy.running(job_id)
        # Its row stays while it holds a live lease: `forkq status` shows it stale.
        assert row.locked_by in {p.name for p in store.list_processes()}
        wait_until(lambda: record.exists(), timeout=20, message="a finished the job")
        partition.heal()  # a writes its success once it can
        wait_until(lambda: store.get_job(job_id) is None, timeout=30, message="the job done")
    finally:
        store.close()
    runs = record_ids(record)
    assert runs == [job_id], f"job {job_id} ran {len(runs)} times: {runs}"
    report_figures("cut-off host", runs=len(runs))


def test_a_failure_that_cannot_be_written_is_not_killed_as_overtime(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    partition: Partition,
    daemons: Any,
) -> None:
    """The handler failed after 2 s of a 5 s timeout while the database was silent: its
    outcome waits to be written, and the child is no overtime to kill."""
    daemon = daemons(
        via(partition, private_mariadb, private_db_url),
        name="a",
        pools={QUEUE: {"workers": 1, "timeout": 5}},
        supervisor={"handlers": ["testhandlers", "failafter"]},
    )
    daemon.write_module("failafter", FAIL_LATER)
    daemon.start().wait_ready()
    queue = Queue(private_db_url)
    job_id = queue.enqueue("t.fail_after", {"seconds": 2}, queue=QUEUE, max_attempts=3)
    queue.close()
    [child] = wait_until(lambda: daemon.running(job_id), timeout=10, message="running")
    partition.cut()
    time.sleep(5 + 3 + 2 + 2)  # past timeout + kill grace + SIGTERM-to-SIGKILL, and then some
    assert daemon.events(events.JOB_TIMED_OUT) == []
    assert child in daemon.pool_children(QUEUE), "the child was killed while writing"
    partition.heal()
    store = open_store(private_db_url)
    try:
        row = wait_until(
            lambda: (r := store.get_job(job_id)) and r.status != JobState.RUNNING and r,
            timeout=30,
            message="the failure written",
        )
    finally:
        store.close()
    assert row.attempts == 1
    assert "the handler's own failure" in (row.last_error or ""), row.last_error


# --- a host whose clock is an hour off (libfaketime) ------------------------------------------


def skewed(offset: str) -> dict[str, str]:
    """The environment of a daemon whose wall clock is `offset` off (monotonic untouched)."""
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        unavailable("libfaketime is not installed: apt-get install libfaketime (make test does)")
    return {
        "LD_PRELOAD": str(found[0]),
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }


def test_a_host_an_hour_behind_still_alerts_on_a_second_outage(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    partition: Partition,
    daemons: Any,
    webhook: Webhook,
) -> None:
    """Cooldowns are written on the database clock; while the database cannot be read
    the host judges them on its own clock plus the offset it last saw, not its own alone."""
    daemon = daemons(
        via(partition, private_mariadb, private_db_url),
        name="late",
        pools={QUEUE: {"workers": 1}},
        supervisor={"check_interval": 1},
        env=skewed("-1h"),
    )
    alerts = f'\n[alerts]\nwebhook_url = "{webhook.url}"\ncooldown = "2s"\n'
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + alerts)
    daemon.start().wait_ready()
    assert abs(time.time() - 3600 - float(daemon_clock(daemon))) < 60  # the skew is real

    def unreachable_alerts() -> list[str]:
        return [t for t in webhook.texts if "database unreachable" in t and "resolved" not in t]

    def resolved() -> int:
        return sum("resolved" in t for t in webhook.texts)

    for outage in (1, 2):
        partition.cut()
        wait_until(
            lambda n=outage: len(unreachable_alerts()) >= n,
            timeout=20,
            message=f"the alert of outage {outage} (got {webhook.texts})",
        )
        partition.heal()
        wait_until(
            lambda n=outage: resolved() >= n,
            timeout=20,
            message=f"outage {outage} resolved (got {webhook.texts})",
        )
        time.sleep(3)  # past the cooldown
    report_figures("an hour behind", webhook_messages=len(webhook.texts))


def test_a_new_schedule_starts_at_boot_on_the_database_clock(
    private_db_url: str,  # noqa: F811
    daemons: Any,
) -> None:
    """A host an hour behind enqueued a slot from before its boot at its first tick."""
    daemon = daemons(
        private_db_url,
        name="late",
        pools={QUEUE: {"workers": 1}},
        supervisor={"check_interval": 0.5},
        env=skewed("-1h"),
    )
    schedule = (
        f'\n[schedules.every_minute]\ncron = "* * * * *"\nhandler = "t.noop"\nqueue = "{QUEUE}"\n'
    )
    daemon.write_config(
        text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + schedule
    )
    daemon.command = [*daemon.command, "--debug"]  # a check_tick line per tick (at debug)
    booted = time.time()  # this process's clock is the database's (both on this machine)
    daemon.start().wait_ready()
    wait_until(lambda: len(daemon.events(events.CHECK_TICK)) >= 4, timeout=20, message="four ticks")
    early = [e for e in daemon.events(events.SCHEDULE_ENQUEUED) if slot_time(e) < booted - 1]
    assert early == [], f"slots from before boot enqueued: {early}"


def daemon_clock(daemon: Daemon) -> float:
    [started] = daemon.events(events.MASTER_STARTED)
    return stamp(started)


def stamp(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def slot_time(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(event["slot"])).timestamp()
