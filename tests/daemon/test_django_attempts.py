"""A Django task's result counts every attempt, those that ended where the task could not
record them too (a real daemon, both backends): an attempt whose worker was killed, and
one cancelled while it ran, come from forkq's attempt history. And on MariaDB, a worker
whose connection the server dropped between two attempts keeps the first one's error (it
read the record on the dead connection and wrote the next attempt over it)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from daemon_util import Daemon, daemons_fixture  # noqa: F401 (fixture)
from django_util import django_db_fixture, shop_fixture  # noqa: F401 (fixtures)
from test_django_daemon import api, daemon_worker, finished, job_id_of, start
from util import backend_of, sql, wait_until

from supervisor import Queue, events

pytestmark = pytest.mark.usefixtures("django_db")

LOST = "supervisor.contrib.django_results.TaskAttemptLost"
CANCELLED = "supervisor.contrib.django_results.TaskCancelled"


def test_an_attempt_whose_worker_was_killed_counts_in_the_result(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    daemon = start(daemons, tmp_path, db_url)
    started = tmp_path / "doomed-started"
    doomed = shop.doomed.enqueue(str(started))
    result = finished(shop.doomed, doomed.id, timeout=40)
    assert result.status == api().TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == 2
    assert result.attempts == 2 and len(set(result.worker_ids)) == 2, result.worker_ids
    [lost] = result.errors
    assert lost.exception_class_path == LOST, lost
    assert "signal 9" in lost.traceback or "SIGKILL" in lost.traceback, lost.traceback
    assert result.started_at < result.last_attempted_at  # the first attempt's, the killed one
    # The job row is gone (deleted on success): the record alone says the same.
    wait_until(lambda: not sql(db_url, "SELECT id FROM forkq_jobs"), message="the row deleted")
    assert shop.doomed.get_result(doomed.id) == result
    assert not daemon.events(events.DJANGO_RESULT_UNREADABLE), daemon.describe()


def test_a_task_cancelled_while_it_runs_counts_that_attempt(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    daemon = start(daemons, tmp_path, db_url)
    started = tmp_path / "nap-started"
    napping = shop.nap.enqueue(60, str(started))
    wait_until(started.exists, timeout=20, message="the task started")
    lease = daemon_worker(daemon, started)
    queue = Queue(db_url, wake=False)
    assert queue.cancel(job_id_of(napping.id))
    queue.close()
    result = finished(shop.nap, napping.id, timeout=30)
    assert result.status == api().TaskResultStatus.FAILED
    assert result.attempts == 1 and result.worker_ids == [lease], result.worker_ids
    assert [e.exception_class_path for e in result.errors][-1:] == [CANCELLED], result.errors
    assert [e.exception_class_path for e in result.errors].count(CANCELLED) == 1


def test_a_connection_the_server_dropped_between_attempts_keeps_the_first_error(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    if backend_of(db_url) != "mysql":
        pytest.skip("a server that drops an idle connection (wait_timeout) is MySQL's")
    daemon = start(daemons, tmp_path, db_url)
    opened: dict[str, Any] = finished(
        shop.connections_opened, shop.connections_opened.enqueue().id
    ).return_value
    flaky = shop.flaky.enqueue("w")
    job_id = job_id_of(flaky.id)

    def failed_once() -> bool:
        rows = sql(db_url, "SELECT status, attempts FROM forkq_jobs WHERE id = ?", [job_id])
        return bool(rows) and rows[0][1] == 1 and rows[0][0] != "running"

    wait_until(failed_once, timeout=20, message="the first attempt failed")
    # The server drops the worker's connection while the job waits for its retry.
    sql(db_url, f"KILL CONNECTION {int(opened['server_id'])}")
    result = finished(shop.flaky, flaky.id, timeout=30)
    assert result.status == api().TaskResultStatus.SUCCESSFUL
    assert result.attempts == 2, result.worker_ids
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"]
    assert not daemon.events(events.DJANGO_RESULT_UNREADABLE), daemon.describe()
    assert not daemon.events(events.DJANGO_RESULT_NOT_SAVED), daemon.describe()


def test_a_task_that_returned_is_not_timed_out_by_its_record_waiting_for_sqlite(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    """The task returned in 1 s; its result record then waited for SQLite's write lock (an
    application's long transaction) inside the handler, under its timeout: the attempt
    timed out and the task ran again. The record is written once the task has returned,
    outside the timeout, and waits for the lock."""
    if backend_of(db_url) != "sqlite":
        pytest.skip("a write lock held by another transaction is SQLite's whole database")
    daemon = start(daemons, tmp_path, db_url, default={"workers": 1, "timeout": 3})
    started = tmp_path / "nap-started"
    napping = shop.nap.enqueue(1.0, str(started))
    wait_until(started.exists, timeout=20, message="the task started")
    holder = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the application's transaction, past the timeout
    time.sleep(6)
    holder.execute("COMMIT")
    holder.close()
    result = finished(shop.nap, napping.id, timeout=40)
    assert result.status == api().TaskResultStatus.SUCCESSFUL, result.errors
    assert result.attempts == 1 and result.errors == [], result.errors
    ran = daemon.events(events.JOB_FINISHED, job_id=job_id_of(napping.id))
    assert [e["outcome"] for e in ran] == ["done"], ran
