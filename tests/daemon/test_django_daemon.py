"""Django tasks run by a real forkq daemon (`handlers = ["supervisor.contrib.django"]`,
DJANGO_SETTINGS_MODULE in its environment), on both backends: return values, each
attempt's error across retries, the running state, results kept after the job row is
gone and pruned with the pool's retention, and a row naming a task the project does not
define ending dead without importing anything.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from daemon_util import Daemon, daemons_fixture  # noqa: F401 (fixture)
from django_util import (
    DAEMON_POOLS,
    DAEMON_SUPERVISOR,
    daemon_env,
    django_db_fixture,  # noqa: F401 (fixture)
    shop_fixture,  # noqa: F401 (fixture)
)
from util import REPO_ROOT, backend_of, count_rows, sql, wait_until

from supervisor import Queue, events
from supervisor.results import JobResult

pytestmark = pytest.mark.usefixtures("django_db")


def api() -> Any:
    from supervisor.contrib import django_compat

    return django_compat


def start(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, **pools: dict[str, Any]
) -> Daemon:
    daemon = daemons(
        pools={**DAEMON_POOLS, **pools},
        supervisor=DAEMON_SUPERVISOR,
        env=daemon_env(tmp_path, db_url, FORKQ_DJANGO_IMPORT_MARK=str(tmp_path / "imported")),
    )
    return daemon.start().wait_ready()


def finished(task: Any, result_id: str, timeout: float = 20.0) -> Any:
    """The task's result once it succeeded or failed for good."""

    def done() -> Any:
        result = task.get_result(result_id)
        return result if result.is_finished else None

    return wait_until(done, timeout=timeout, message=f"task result {result_id} finished")


def job_id_of(result_id: str) -> int:
    """The forkq job id of a TaskResult id (`JOBID-TOKEN`)."""
    return int(result_id.partition("-")[0])


def worker_pids(daemon: Daemon, pool: str) -> set[str]:
    return {f"{socket.gethostname()}:{pid}" for pid in daemon.pool_children(pool)}


def process_of(worker_id: str) -> str:
    """host:pid of a worker id (the lease name host:pid:token)."""
    host, pid, token = worker_id.split(":")
    assert len(token) == 8, worker_id
    return f"{host}:{pid}"


def test_the_daemon_runs_tasks_and_get_result_has_their_return_values(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    daemon = start(daemons, tmp_path, db_url)
    workers = worker_pids(daemon, "default") | worker_pids(daemon, "reports")
    added = shop.add.enqueue(2, 3)
    report = shop.report.enqueue("weekly", rows=[1, 2])
    awaited = shop.add_async.enqueue(20, 22)
    nothing = shop.noop.enqueue()
    status = api().TaskResultStatus

    result = finished(shop.add, added.id)
    assert result.status == status.SUCCESSFUL
    assert result.return_value == 5
    assert result.errors == []
    assert result.attempts == 1 and {process_of(w) for w in result.worker_ids} <= workers
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.last_attempted_at == result.started_at
    assert (result.args, result.kwargs) == ([2, 3], {})
    assert result.task == shop.add

    reported = finished(shop.report, report.id)
    assert reported.return_value["rows"] == [1, 2]
    assert f"{socket.gethostname()}:{reported.return_value['pid']}" in worker_pids(
        daemon, "reports"
    )  # the reports pool ran it, in a child of the daemon
    assert finished(shop.add_async, awaited.id).return_value == 42
    assert finished(shop.noop, nothing.id).return_value is None
    # on_success = "delete": the job rows are gone, the results stay.
    wait_until(lambda: count_rows(db_url, "forkq_jobs") == 0, message="done jobs deleted")
    assert count_rows(db_url, "forkq_results") == 4
    assert shop.add.get_result(added.id) == result  # read from forkq_results alone
    # One store of results: forkq's own Queue reads a task's return value there too.
    queue = Queue(db_url, wake=False)
    assert queue.result(job_id_of(added.id)) == JobResult(job_id_of(added.id), "done", True, 5)
    queue.close()


def test_a_retried_task_keeps_each_attempts_error(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    daemon = start(daemons, tmp_path, db_url)
    status = api().TaskResultStatus
    flaky = shop.flaky.enqueue("w")
    broken = shop.broken.enqueue("no good")
    unjsonable = shop.unjsonable.enqueue()

    result = finished(shop.flaky, flaky.id, timeout=30)
    assert result.status == status.SUCCESSFUL
    assert result.return_value == {"word": "w", "attempt": 2, "result_id": flaky.id}
    assert result.attempts == 2
    [error] = result.errors
    assert error.exception_class_path == "builtins.RuntimeError"
    assert error.exception_class is RuntimeError
    assert "flaky: attempt 1 of 'w' fails" in error.traceback
    assert "Traceback (most recent call last)" in error.traceback
    assert result.started_at < result.last_attempted_at < result.finished_at
    # forkq's attempt history has the failed attempt as well (forkq_attempts).
    queue = Queue(db_url, wake=False)
    [attempt] = queue.store.job_attempts(job_id_of(flaky.id))
    assert attempt["outcome"] == "retry" and "flaky: attempt 1 of 'w' fails" in attempt["error"]
    queue.close()

    failed = finished(shop.broken, broken.id, timeout=30)
    assert failed.status == status.FAILED
    assert failed.attempts == 2  # OPTIONS max_attempts = 2
    assert [e.exception_class_path for e in failed.errors] == ["builtins.ValueError"] * 2
    assert all("ValueError: no good" in e.traceback for e in failed.errors)
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value
    [(job_status, last_error)] = sql(
        db_url, "SELECT status, last_error FROM forkq_jobs WHERE id = ?", [job_id_of(broken.id)]
    )
    assert job_status == "dead" and "no good" in last_error

    returned_a_set = finished(shop.unjsonable, unjsonable.id, timeout=30)
    assert returned_a_set.status == status.FAILED
    assert returned_a_set.errors[-1].exception_class_path == "builtins.TypeError"
    assert "not JSON serializable" in returned_a_set.errors[-1].traceback
    # Dead at once, as a plain handler's unkeepable value: a retry would run its work again.
    assert returned_a_set.attempts == 1, returned_a_set.errors
    [(job_status, last_error)] = sql(
        db_url, "SELECT status, last_error FROM forkq_jobs WHERE id = ?", [job_id_of(unjsonable.id)]
    )
    assert job_status == "dead" and "its return value is not JSON" in last_error
    # django-tasks logs each failed attempt with its traceback: a line of the daemon's log
    # (one JSON object a line), not plain text on stderr.
    logged = [e for e in daemon.events(events.LIBRARY_LOG) if "Traceback" in e.get("exception", "")]
    assert logged and "Traceback" not in daemon.stderr_text(), daemon.stderr_text()[-2000:]


def test_a_running_task_reads_as_running_on_its_worker(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    daemon = start(daemons, tmp_path, db_url)
    started = tmp_path / "nap-started"
    napping = shop.nap.enqueue(3, str(started))
    wait_until(started.exists, timeout=20, message="the task started")
    result = shop.nap.get_result(napping.id)
    assert result.status == api().TaskResultStatus.RUNNING
    assert result.is_finished is False
    assert result.started_at is not None and result.finished_at is None
    lease = daemon_worker(daemon, started)
    assert result.worker_ids == [lease]
    with pytest.raises(ValueError, match="not finished yet"):
        _ = result.return_value
    done = finished(shop.nap, napping.id)
    assert done.return_value == 3
    assert done.worker_ids == [lease]  # the same name once it is recorded


def daemon_worker(daemon: Daemon, started: Path) -> str:
    pid = int(started.read_text(encoding="utf-8"))
    assert pid in daemon.pool_children("default")
    [(locked_by,)] = sql(daemon.db_url, "SELECT locked_by FROM forkq_jobs")
    return str(locked_by)


def test_a_row_naming_a_task_the_project_does_not_define_ends_dead_and_imports_nothing(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    mark = tmp_path / "imported"
    probe = tmp_path / "probe"  # the mark works: importing shop.untouched leaves one
    env = {**daemon_env(tmp_path, db_url, FORKQ_DJANGO_IMPORT_MARK=str(probe))}
    subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); import shop.untouched"],
        env={**os.environ, **env},
        check=True,
        timeout=60,
    )
    assert probe.exists()
    start(daemons, tmp_path, db_url)
    payload = {"args": [], "kwargs": {}, "backend": "default", "queue_name": "default"}
    bad = [
        # Importable (a module of an installed app), but nothing of the project imports it.
        ({**payload, "task": "shop.untouched.run"}, "not defined"),
        ({**payload, "task": "os.system", "args": [f"touch {mark}"]}, "not defined"),
        ({**payload, "task": "shop.tasks.add", "backend": "nope"}, "nope"),
        ({"task": 5}, "not a Django task payload"),
    ]
    queue = Queue(db_url)
    try:
        rows = {queue.enqueue("django.task", row): expected for row, expected in bad}
        good = shop.add.enqueue(1, 1)  # and the daemon goes on
    finally:
        queue.close()

    def dead() -> dict[int, str] | None:
        found = dict(sql(db_url, "SELECT id, last_error FROM forkq_jobs WHERE status = 'dead'"))
        return found if len(found) == len(rows) else None

    errors = wait_until(dead, timeout=20, message="every bad row dead")
    for job_id, expected in rows.items():
        assert expected in errors[job_id], errors[job_id]
        [(attempts,)] = sql(db_url, "SELECT attempts FROM forkq_jobs WHERE id = ?", [job_id])
        assert attempts == 1  # dead at once: no retry can make it defined
    assert finished(shop.add, good.id).return_value == 2
    assert not mark.exists(), mark.read_text(encoding="utf-8")
    with pytest.raises(api().TaskResultDoesNotExist):
        shop.add.get_result(str(next(iter(rows))))  # no task of this project: no result


def test_a_task_is_its_own_handler_and_older_django_task_rows_still_run(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    start(daemons, tmp_path, db_url)
    added = shop.add.enqueue(2, 2)
    [(handler,)] = sql(db_url, "SELECT handler FROM forkq_jobs WHERE id = ?", [job_id_of(added.id)])
    assert handler == "shop.tasks.add"  # what forkq jobs, status and the dashboard show
    payload = {"args": [20, 1], "kwargs": {}, "backend": "default", "queue_name": "default"}
    queue = Queue(db_url)
    try:
        older = queue.enqueue("django.task", {**payload, "task": "shop.tasks.add"})
        # Under the path of a module nothing imports: no handler, and nothing imported.
        unknown = queue.enqueue("shop.untouched.run", {**payload, "task": "shop.untouched.run"})
        # A task's handler with another task in its payload runs neither.
        swapped = queue.enqueue("shop.tasks.add", {**payload, "task": "shop.tasks.broken"})
    finally:
        queue.close()
    assert finished(shop.add, added.id).return_value == 4
    assert finished(shop.add, str(older)).return_value == 21

    def dead() -> dict[int, str] | None:
        found = dict(sql(db_url, "SELECT id, last_error FROM forkq_jobs WHERE status = 'dead'"))
        return found if len(found) == 2 else None

    errors = wait_until(dead, timeout=20, message="the unknown and the swapped rows dead")
    assert "unknown handler 'shop.untouched.run'" in errors[unknown], errors
    assert "payload names the task 'shop.tasks.broken'" in errors[swapped], errors
    assert not (tmp_path / "imported").exists()
    with pytest.raises(api().TaskResultDoesNotExist):
        shop.broken.get_result(str(swapped))


def test_a_worker_keeps_its_database_connection_across_tasks(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    """Django's default CONN_MAX_AGE = 0 closed the connection after every task, so each
    task opened a new one; a worker now keeps it, and replaces only a broken one."""
    start(daemons, tmp_path, db_url)

    def run_one() -> dict[str, Any]:
        value: dict[str, Any] = finished(
            shop.connections_opened, shop.connections_opened.enqueue().id
        ).return_value
        return value

    seen = [run_one() for _ in range(6)]
    assert len({s["pid"] for s in seen}) == 1, seen  # one worker ran them all
    assert len({s["opened"] for s in seen}) == 1, seen  # and opened no connection after the first
    assert len({s["server_id"] for s in seen}) == 1, seen
    if backend_of(db_url) != "mysql":
        return
    sql(db_url, f"KILL CONNECTION {int(seen[-1]['server_id'])}")  # the server drops it
    again = run_one()  # the health check finds it gone: a new one, and the task runs
    assert again["pid"] == seen[-1]["pid"]
    assert again["opened"] == seen[-1]["opened"] + 1
    assert again["server_id"] != seen[-1]["server_id"]
    assert run_one()["server_id"] == again["server_id"]


def test_results_are_pruned_with_the_pools_retention(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    start(daemons, tmp_path, db_url, default={"workers": 1, "retention": 1})
    kept = shop.report.enqueue("kept")  # the reports pool keeps its 7 days
    gone = shop.add.enqueue(1, 2)
    assert finished(shop.add, gone.id).return_value == 3
    assert finished(shop.report, kept.id).status == api().TaskResultStatus.SUCCESSFUL
    wait_until(
        lambda: count_rows(db_url, "forkq_results", "job_id = ?", [job_id_of(gone.id)]) == 0,
        timeout=20,
        message="the result pruned after the pool's retention",
    )
    with pytest.raises(api().TaskResultDoesNotExist):
        shop.add.get_result(gone.id)
    assert shop.report.get_result(kept.id).return_value["name"] == "kept"


def test_the_daemon_refuses_to_boot_without_django_settings_module(
    tmp_path: Path, db_url: str
) -> None:
    config = tmp_path / "forkq.toml"
    config.write_text(
        f'[database]\nurl = "{db_url}"\n[supervisor]\nhandlers = ["supervisor.contrib.django"]\n'
        "[pools.default]\nworkers = 1\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "run", "-c", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 78, done.stderr
    assert "DJANGO_SETTINGS_MODULE is not set" in done.stderr
    assert str(config) in done.stderr


def test_results_written_by_the_daemon_are_json_text(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    start(daemons, tmp_path, db_url)
    flaky = shop.flaky.enqueue("json")
    finished(shop.flaky, flaky.id, timeout=30)
    [(status, value, errors, workers)] = sql(
        db_url,
        "SELECT status, return_value, errors, workers FROM forkq_results WHERE job_id = ?",
        [job_id_of(flaky.id)],
    )
    assert status == "succeeded"
    assert json.loads(value)["attempt"] == 2
    [error] = json.loads(errors)
    assert (error["attempt"], error["exception_class_path"]) == (1, "builtins.RuntimeError")
    assert len(json.loads(workers)) == 2


def test_a_reload_keeps_the_django_tasks_and_sets_django_up_once(
    daemons: Callable[..., Daemon], tmp_path: Path, db_url: str, shop: ModuleType
) -> None:
    daemon = start(daemons, tmp_path, db_url)
    assert finished(shop.add, shop.add.enqueue(1, 2).id).return_value == 3
    daemon.send_signal(signal.SIGHUP)  # re-imports supervisor.contrib.django
    daemon.wait_event(events.CONFIG_RELOADED)
    assert finished(shop.add, shop.add.enqueue(3, 4).id).return_value == 7
    assert len(daemon.events(events.DJANGO_READY)) == 1  # django.setup() ran once, at boot
    assert daemon.events(events.RELOAD_REFUSED) == []
