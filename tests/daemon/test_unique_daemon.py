"""Uniqueness scopes against the states a real daemon moves jobs through, and a debounce
storm run by a real daemon (README "Unique jobs"). Windows, replace, debounce, raw INSERT,
CLI and PHP without a daemon: tests/store/test_unique.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from daemon_util import Daemon, record_ids
from util import wait_until

from supervisor import Queue
from supervisor.models import Enqueued

GATED_SOURCE = '''\
"""A handler held until its gate file exists (written by tests/daemon/test_unique_daemon.py)."""

import os
import time

from supervisor import Snooze, handler


@handler("u.gate")
def gate(payload, job):
    while not os.path.exists(payload["gate"]):
        time.sleep(0.02)
    with open(payload["file"], "a") as out:
        out.write(f"{job.id},0,0,0\\n")


@handler("u.then")
def then(payload, job):
    """Held until its gate exists, then fails (a retry) or snoozes, as its payload says."""
    while not os.path.exists(payload["gate"]):
        time.sleep(0.02)
    if payload.get("then") == "fail":
        raise RuntimeError("boom")
    if payload.get("then") == "snooze":
        raise Snooze(0)
    with open(payload["file"], "a") as out:
        out.write(f"{job.id},0,0,0\\n")
'''


def status_of(queue: Queue, job_id: int) -> str:
    row = queue.get(job_id)
    return "gone" if row is None else str(row.status)


def shown_status(queue: Queue, job_id: int) -> str:
    """As `forkq jobs` shows it: a job claimed behind another is `claimed`, not running."""
    row = queue.get(job_id)
    return "gone" if row is None else row.shown_status


def test_each_scope_holds_the_key_in_its_states_as_the_daemon_moves_the_job(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    pool = {"workers": 3, "max_workers": 3, "timeout": 60, "on_success": "keep"}
    daemon = daemons(
        pools={"work": pool}, supervisor={"handlers": ["testhandlers", "uniquehandlers"]}
    )
    daemon.write_module("uniquehandlers", GATED_SOURCE)
    daemon.start().wait_ready()
    gate, record = tmp_path / "gate", tmp_path / "record.txt"
    payload = {"gate": str(gate), "file": str(record)}
    queue = Queue(db_url)
    try:

        def enqueue(key: str, scope: str) -> int:
            job_id = queue.enqueue("u.gate", payload, queue="work", unique_key=key,
                                   unique_while=scope)  # fmt: skip
            return job_id if not job_id.conflicted else -job_id  # negative: conflicted

        held = {scope: enqueue(scope, scope) for scope in ("queued", "active", "kept")}
        assert min(held.values()) > 0
        # Started, each in a child of its own: a child may claim two at once and hold one
        # ("claimed", its status running) until the master hands it back to the idle third
        # child, which meanwhile would take the next job of the queue.
        wait_until(
            lambda: all(shown_status(queue, i) == "running" for i in held.values()),
            timeout=30,
            message=f"three jobs running: {daemon.describe()}",
        )
        # Running: only active and kept hold the key.
        queued_again = enqueue("queued", "queued")
        assert queued_again > 0 and queued_again != held["queued"]
        assert enqueue("queued", "queued") == -queued_again  # it waits: it holds the key
        assert enqueue("active", "active") == -held["active"]
        assert enqueue("kept", "kept") == -held["kept"]
        gate.touch()
        every = [*held.values(), queued_again]
        wait_until(
            lambda: all(status_of(queue, i) == "done" for i in every),
            timeout=30,
            message=f"the jobs done: {daemon.describe()}",
        )
        # Done (and kept): only kept holds the key.
        after = {scope: enqueue(scope, scope) for scope in ("queued", "active", "kept")}
        assert after["kept"] == -held["kept"]
        assert after["queued"] > 0 and after["active"] > 0
        every += [after["queued"], after["active"]]
        wait_until(
            lambda: sorted(record_ids(record)) == sorted(every),
            timeout=30,
            message=f"each job run once: {daemon.describe()}",
        )
    finally:
        queue.close()
    assert daemon.alive()


def test_a_debounce_storm_runs_one_job_once_within_debounce_max(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    """1,000 enqueues of one key in 2 s, each pushing the job 0.5 s later, at most 3 s
    past the first: one job, run once by the daemon, its run_at never past the cap."""
    daemon = daemons(pools={"work": {"workers": 1, "on_success": "keep"}}).start().wait_ready()
    record = tmp_path / "record.txt"
    queue = Queue(db_url, wake=False)  # the daemon's poll finds it: no datagram per enqueue
    try:
        ids = []
        start = time.monotonic()
        for number in range(1000):
            options = {"unique_key": "storm", "delay": 0.5, "debounce_max": 3}
            job = {"file": str(record), "n": number}
            ids.append(
                queue.enqueue("t.record", job, queue="work", on_conflict="debounce", **options)
            )
            ahead = start + number * 0.002 - time.monotonic()  # 1,000 spread over 2 s
            if ahead > 0:
                time.sleep(ahead)
        job_id = ids[0]
        assert not job_id.conflicted and set(ids) == {job_id}
        wait_until(
            lambda: status_of(queue, job_id) == "done",
            timeout=30,
            message=f"the storm's job done: {daemon.describe()}",
        )
        row = queue.get(job_id)
        assert row is not None and row.started_at is not None
        assert row.run_at.timestamp() <= row.enqueued_at.timestamp() + 3 + 1e-6
        assert row.started_at >= row.run_at
        assert record_ids(record) == [job_id]
        print(f"storm: {time.monotonic() - start:.2f}s of enqueues; started "
              f"{(row.started_at - row.enqueued_at).total_seconds():.2f}s after the first")  # fmt: skip
        # The enqueues that came after it ran were held by it (kept): still one job.
        late = queue.enqueue("t.record", {"file": str(record)}, queue="work",
                             unique_key="storm", on_conflict="debounce")  # fmt: skip
        assert late == job_id and late.conflicted
    finally:
        queue.close()
    assert record_ids(record) == [job_id]


def test_a_job_failing_or_snoozing_while_a_newer_one_holds_its_key_yields_to_it(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    """unique_while="queued": a job runs (its key free), a newer job with its key waits
    (one worker), then the first fails with a retry left, or snoozes: moving back into the
    queue would make two holders, so it ends cancelled, superseded, and the newer one runs."""
    pool = {"workers": 1, "max_workers": 1, "timeout": 60}
    daemon = daemons(
        pools={"fails": pool, "naps": pool},
        supervisor={"handlers": ["testhandlers", "uniquehandlers"]},
    )
    daemon.write_module("uniquehandlers", GATED_SOURCE)
    daemon.start().wait_ready()
    gate, record = tmp_path / "gate", tmp_path / "record.txt"
    queue = Queue(db_url)
    try:

        def enqueue(pool: str, then: str) -> Enqueued:
            payload = {"gate": str(gate), "file": str(record), "then": then}
            return queue.enqueue("u.then", payload, queue=pool, unique_key=pool,
                                 unique_while="queued")  # fmt: skip

        first = {"fails": enqueue("fails", "fail"), "naps": enqueue("naps", "snooze")}
        wait_until(
            lambda: all(status_of(queue, i) == "running" for i in first.values()),
            timeout=30,
            message=f"both running: {daemon.describe()}",
        )
        newer = {pool: enqueue(pool, "record") for pool in first}
        assert not any(job.conflicted for job in newer.values())
        gate.touch()
        wait_until(
            lambda: sorted(record_ids(record)) == sorted(newer.values()),
            timeout=30,
            message=f"each newer job run once: {daemon.describe()}",
        )
        for pool, job_id in first.items():
            row = queue.get(job_id)
            assert row is not None and row.status == "cancelled", (pool, row)
            assert row.last_error == f"superseded: its unique key is held by job {newer[pool]}"
    finally:
        queue.close()
    assert daemon.alive()
