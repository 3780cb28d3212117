"""supervisor.contrib.django.ForkqBackend against Django's Tasks contract, in a real Django
project (tests/django_project) on both backends: what Django's own tests/tasks/ ask of a
backend that stores its tasks (enqueue, aenqueue, get_result, validation, the feature
flags), and what forkq adds: the job row in Django's transaction, priorities, run_after
and queues as forkq's columns. The daemon's side: test_django_daemon.py.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django_util import django_db_fixture, shop_fixture  # noqa: F401 (fixtures)
from util import backend_of, count_rows, sql

from supervisor import Queue
from supervisor.store import Store

pytestmark = pytest.mark.usefixtures("django_db")


def api() -> Any:
    """Django's Tasks names as the backend sees them (Django 6 or the backport)."""
    from supervisor.contrib import django_compat

    return django_compat


def job_id(result_id: str) -> int:
    """The forkq job id of a TaskResult id (`JOBID-TOKEN`)."""
    return int(result_id.partition("-")[0])


def job_row(db_url: str, result_id: str) -> dict[str, Any]:
    """The job's row, read on a connection of its own (so: what is committed)."""
    rows = sql(
        db_url,
        "SELECT handler, queue, priority, status, max_attempts, payload FROM forkq_jobs"
        " WHERE id = ?",
        [job_id(result_id)],
    )
    assert len(rows) == 1, rows
    handler, queue, priority, status, max_attempts, payload = rows[0]
    return {
        "handler": handler,
        "queue": queue,
        "priority": priority,
        "status": status,
        "max_attempts": max_attempts,
        "payload": json.loads(payload),
    }


def local_function() -> None:
    return None


# --- the backend -------------------------------------------------------------------------------


def test_the_default_backend_is_forkq_with_every_feature_flag(shop: ModuleType) -> None:
    from supervisor.contrib.django import ForkqBackend

    backend = api().task_backends["default"]
    assert isinstance(backend, ForkqBackend)
    assert backend.alias == "default"
    assert backend.database == "default"
    assert backend.max_attempts == 2
    assert backend.queues == {"default", "reports"}
    assert backend.supports_defer is True
    assert backend.supports_async_task is True
    assert backend.supports_get_result is True
    assert backend.supports_priority is True
    assert list(backend.check()) == []
    assert shop.add.get_backend() is backend


def test_backend_options_are_checked() -> None:
    from supervisor.contrib.django import ForkqBackend

    with pytest.raises(api().InvalidTaskBackend, match="unknown"):
        ForkqBackend("x", {"OPTIONS": {"databse": "default"}})
    for attempts in (0, -1, "3", True, 1.5):
        with pytest.raises(api().InvalidTaskBackend, match="max_attempts"):
            ForkqBackend("x", {"OPTIONS": {"max_attempts": attempts}})
    with pytest.raises(api().InvalidTaskBackend, match="database"):
        ForkqBackend("x", {"OPTIONS": {"database": ""}})
    missing = ForkqBackend("x", {"OPTIONS": {"database": "nowhere"}})
    [error] = list(missing.check())
    assert error.id == "forkq.E001" and "'nowhere'" in error.msg


# --- enqueue -----------------------------------------------------------------------------------


def test_enqueue_writes_one_ready_job_and_returns_its_result(shop: ModuleType, db_url: str) -> None:
    before = datetime.now(UTC)
    result = shop.add.enqueue(1, b=3)
    status = api().TaskResultStatus
    assert result.status == status.READY
    assert result.is_finished is False
    assert result.started_at is None
    assert result.last_attempted_at is None
    assert result.finished_at is None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        _ = result.return_value
    assert result.task == shop.add
    assert result.args == [1]
    assert result.kwargs == {"b": 3}
    assert result.attempts == 0
    assert result.errors == []
    assert result.backend == "default"
    assert result.enqueued_at is not None
    assert before - timedelta(seconds=5) <= result.enqueued_at <= datetime.now(UTC)
    row = job_row(db_url, result.id)
    assert row["handler"] == "shop.tasks.add"  # the task's path, as forkq jobs shows it
    assert (row["queue"], row["priority"], row["status"]) == ("default", 0, "ready")
    assert row["max_attempts"] == 2  # OPTIONS max_attempts
    assert row["payload"]["task"] == "shop.tasks.add"
    assert (row["payload"]["args"], row["payload"]["kwargs"]) == ([1], {"b": 3})


def test_aenqueue_and_aget_result_go_through_the_same_rows(shop: ModuleType, db_url: str) -> None:
    from asgiref.sync import sync_to_async
    from django.db import connections
    from django_util import point_django_at

    async def scenario() -> tuple[Any, Any]:
        # Django runs sync code for coroutines in a thread of its own: point it too.
        await sync_to_async(point_django_at, thread_sensitive=True)(db_url)
        try:
            result = await shop.noop.aenqueue()
            return result, await shop.noop.aget_result(result.id)
        finally:
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    result, again = asyncio.run(scenario())
    assert result.status == api().TaskResultStatus.READY
    assert (result.args, result.kwargs, result.attempts) == ([], {}, 0)
    assert again == result
    assert job_row(db_url, result.id)["payload"]["task"] == "shop.tasks.noop"


def test_get_result_reads_back_exactly_what_enqueue_returned(shop: ModuleType) -> None:
    # A fixed day: on the nights Paris changes its clocks, a wall time 3 hours ahead can
    # be skipped or repeated, and such a time never equals its fixed-offset reading.
    later = datetime(2031, 7, 14, 2, 30, 15, 123456, tzinfo=ZoneInfo("Europe/Paris"))
    for task in (
        shop.add,
        shop.add.using(priority=-7),
        shop.report.using(run_after=later),
        shop.flaky,
        shop.add_async,
    ):
        result = task.enqueue(*(["w"] if task.takes_context else [2, 3]))
        backend = api().task_backends["default"]
        assert backend.get_result(result.id) == result
        assert task.get_result(result.id) == result
        snapshot = dataclasses.asdict(result)
        result.refresh()
        assert dataclasses.asdict(result) == snapshot


def test_get_result_of_an_id_that_is_no_django_task_raises_does_not_exist(
    shop: ModuleType, store: Store
) -> None:
    plain = Queue(store=store).enqueue("t.noop", {}, queue="default")  # forkq's own job
    backend = api().task_backends["default"]
    ids = (str(plain), "999999", "0", "-1", "abc", "", "1.5", "9" * 30, "١٢", f"{plain}-x", "-")
    for result_id in ids:
        with pytest.raises(api().TaskResultDoesNotExist):
            backend.get_result(result_id)
        with pytest.raises(api().TaskResultDoesNotExist):
            shop.noop.get_result(result_id)


def test_get_result_through_another_task_is_a_mismatch(shop: ModuleType) -> None:
    result = shop.add.enqueue(1, 2)
    with pytest.raises(Exception, match="Task does not match") as caught:
        shop.noop.get_result(result.id)
    assert type(caught.value).__name__ == "TaskResultMismatch"


def test_enqueue_sends_task_enqueued_with_the_result(shop: ModuleType) -> None:
    seen: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append((sender, task_result))

    api().task_enqueued.connect(receiver)
    try:
        result = shop.noop.enqueue()
    finally:
        api().task_enqueued.disconnect(receiver)
    assert seen == [(type(api().task_backends["default"]), result)]


def test_arguments_that_are_not_json_are_refused_before_any_row(
    shop: ModuleType, db_url: str
) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        shop.add.enqueue(datetime.now(), 1)
    with pytest.raises(TypeError, match="Unsupported type"):
        shop.add.enqueue(1, b={1, 2})
    assert count_rows(db_url, "forkq_jobs") == 0


def test_tasks_are_validated_as_django_asks(shop: ModuleType) -> None:
    invalid = api().InvalidTask

    def nested() -> None:
        return None

    for func in (nested, any):
        with pytest.raises(invalid, match="module level"):
            dataclasses.replace(shop.noop, func=func)
    assert dataclasses.replace(shop.noop, func=local_function).func is local_function
    with pytest.raises(invalid, match="Queue 'nope' is not valid for backend"):
        shop.add.using(queue_name="nope")
    for priority in (101, -101, 3.1):
        with pytest.raises(invalid, match="priority must be a whole number"):
            shop.add.using(priority=priority)
    assert shop.add.using(priority=100).priority == 100
    assert shop.add.using(priority=-100).priority == -100
    with pytest.raises(invalid, match="aware"):
        shop.add.using(run_after=datetime.now())
    with pytest.raises(invalid, match="context"):
        dataclasses.replace(shop.add, takes_context=True)
    assert dataclasses.replace(shop.flaky, takes_context=True).takes_context


def test_a_queue_name_longer_than_forkqs_is_refused(shop: ModuleType) -> None:
    from supervisor.contrib.django import ForkqBackend

    backend = ForkqBackend("any", {"QUEUES": []})  # no QUEUES list: any name, up to 64
    task = copy.copy(shop.noop)  # past the default backend's QUEUES check
    object.__setattr__(task, "queue_name", "q" * 65)
    with pytest.raises(api().InvalidTask, match="at most 64"):
        backend.validate_task(task)
    object.__setattr__(task, "queue_name", "q" * 64)
    backend.validate_task(task)


# --- forkq's columns -----------------------------------------------------------------------------


def test_priorities_are_forkqs_priorities_and_keep_their_order(
    shop: ModuleType, db_url: str, store: Store
) -> None:
    priorities = [-100, 5, 100, 0, -3, 99]
    ids = {job_id(shop.noop.using(priority=p).enqueue().id): p for p in priorities}
    for number, priority in ids.items():
        assert job_row(db_url, str(number))["priority"] == priority
    claimed = store.claim("default", "test-owner", len(ids), lease=30)
    assert [ids[job.id] for job in claimed] == sorted(priorities, reverse=True)


def test_run_after_is_the_jobs_run_at_to_the_microsecond(
    shop: ModuleType, db_url: str, store: Store
) -> None:
    paris = datetime(2031, 7, 14, 2, 30, 15, 654321, tzinfo=ZoneInfo("Europe/Paris"))
    soon = datetime.now(UTC) + timedelta(hours=2, microseconds=7)
    for when in (paris, soon):
        result = shop.add.using(run_after=when).enqueue(1, 2)
        job = store.get_job(job_id(result.id))
        assert job is not None
        # The same instant, whatever the zone. MySQL's FROM_UNIXTIME truncates the bound
        # epoch double, which may sit a hair below the microsecond: at most 1 us off there.
        assert abs(job.run_at - when) <= timedelta(microseconds=1)
        if backend_of(db_url) == "sqlite":
            assert job.run_at == when
        assert job.status == "scheduled"  # due later: out of the claim's range until then
        assert result.task.run_after == when
        assert result.status == api().TaskResultStatus.READY
    assert store.claim("default", "test-owner", 10, lease=30) == []  # never early


def test_queue_name_and_the_tasks_own_priority_are_the_jobs(shop: ModuleType, db_url: str) -> None:
    result = shop.report.enqueue("weekly", rows=[1, 2])
    row = job_row(db_url, result.id)
    assert (row["queue"], row["priority"]) == ("reports", 10)
    assert row["payload"]["queue_name"] == "reports"
    assert result.task.queue_name == "reports"


# --- Django's transaction ------------------------------------------------------------------------


def test_a_rolled_back_transaction_leaves_no_job(shop: ModuleType, db_url: str) -> None:
    from django.db import transaction

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        result = shop.add.enqueue(1, 2)
        # Django's connection sees its own uncommitted job; no other connection does.
        assert shop.add.get_result(result.id).status == api().TaskResultStatus.READY
        assert count_rows(db_url, "forkq_jobs") == 0
        raise Abort()
    assert count_rows(db_url, "forkq_jobs") == 0
    with pytest.raises(api().TaskResultDoesNotExist):
        shop.add.get_result(result.id)


def test_a_result_id_names_one_enqueue_even_when_its_job_id_is_reused(
    shop: ModuleType, db_url: str
) -> None:
    """SQLite hands the id of a job whose transaction rolled back to the next job: the
    first result id must not read the second task's result."""
    from django.db import transaction

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        lost = shop.add.enqueue(1, 2)
        raise Abort()
    kept = shop.add.enqueue(40, 2)
    if backend_of(db_url) == "sqlite":
        assert job_id(lost.id) == job_id(kept.id)  # the id was reused: the case at hand
    assert lost.id != kept.id
    with pytest.raises(api().TaskResultDoesNotExist):
        shop.add.get_result(lost.id)
    assert shop.add.get_result(kept.id).args == [40, 2]
    with pytest.raises(api().TaskResultDoesNotExist):
        shop.add.get_result(str(job_id(kept.id)))  # the job id alone names no result


def test_a_committed_transaction_makes_the_job(shop: ModuleType, db_url: str) -> None:
    from django.db import transaction

    with transaction.atomic():
        result = shop.add.enqueue(1, 2)
        with transaction.atomic():  # a savepoint that rolls back takes its job with it
            inner = shop.noop.enqueue()
            transaction.set_rollback(True)
    assert count_rows(db_url, "forkq_jobs") == 1
    assert job_row(db_url, result.id)["status"] == "ready"
    with pytest.raises(api().TaskResultDoesNotExist):
        shop.noop.get_result(inner.id)


def test_outside_a_transaction_the_job_exists_at_once(shop: ModuleType, db_url: str) -> None:
    result = shop.add.enqueue(4, 5)
    assert count_rows(db_url, "forkq_jobs") == 1  # another connection sees it: autocommit
    assert job_row(db_url, result.id)["payload"]["args"] == [4, 5]
