"""The Django backend over two databases (OPTIONS `queue_databases`), with the real test
project (its "routed" backend puts queue "reports" on the alias "reports_db"), on both
backends: two SQLite files, or two MariaDB databases on one server. A task lands in its
queue's database, inside that alias's transaction, and its result is read back there."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from databases_util import reports_url_fixture  # noqa: F401  (the `reports_url` fixture)
from django_util import django_db_fixture, point_django_at, shop_fixture  # noqa: F401
from util import count_rows, sql

pytestmark = pytest.mark.usefixtures("django_db")


def api() -> Any:
    from supervisor.contrib import django_compat

    return django_compat


@pytest.fixture(name="reports_db")
def reports_db_fixture(django_db: str, reports_url: str) -> Iterator[str]:
    """Django's alias "reports_db" is the second database."""
    point_django_at(reports_url, "reports_db")
    yield reports_url
    from django.db import connections

    connections.close_all()


def handlers(url: str) -> list[tuple[str, str]]:
    return [(h, q) for h, q in sql(url, "SELECT handler, queue FROM forkq_jobs ORDER BY id")]


def test_each_task_is_written_in_its_queues_database_and_read_back_there(
    shop: ModuleType, db_url: str, reports_db: str
) -> None:
    added = shop.add.using(backend="routed").enqueue(1, 2)
    report = shop.report.using(backend="routed").enqueue("weekly", rows=[3])
    assert handlers(db_url) == [("shop.tasks.add", "default")]
    assert handlers(reports_db) == [("shop.tasks.report", "reports")]
    # ids are per database (both may be job 1): each result id reads its own task
    backend = api().task_backends["routed"]
    assert backend.get_result(added.id).args == [1, 2]
    assert backend.get_result(report.id).args == ["weekly"]
    assert backend.get_result(report.id).task.queue_name == "reports"
    with pytest.raises(api().TaskResultDoesNotExist):
        backend.get_result(report.id.partition("-")[0] + "-0000")
    assert list(backend.check()) == []


def test_a_task_is_enqueued_inside_its_databases_transaction(
    shop: ModuleType, db_url: str, reports_db: str
) -> None:
    from django.db import transaction

    routed = shop.report.using(backend="routed")

    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic(using="reports_db"):
        lost = routed.enqueue("rolled back")
        backend = api().task_backends["routed"]
        assert backend.get_result(lost.id).status == api().TaskResultStatus.READY
        assert count_rows(reports_db, "forkq_jobs") == 0  # not committed yet
        raise Abort()
    assert count_rows(reports_db, "forkq_jobs") == 0
    with transaction.atomic(using="reports_db"):
        kept = routed.enqueue("committed")
    assert handlers(reports_db) == [("shop.tasks.report", "reports")]
    assert count_rows(db_url, "forkq_jobs") == 0
    assert api().task_backends["routed"].get_result(kept.id).args == ["committed"]


def test_queue_databases_is_checked() -> None:
    from supervisor.contrib.django import ForkqBackend

    for bad in (["reports"], {"reports": ""}, {"reports": 3}):
        with pytest.raises(api().InvalidTaskBackend, match="queue_databases"):
            ForkqBackend("x", {"OPTIONS": {"queue_databases": bad}})
    missing = ForkqBackend("x", {"OPTIONS": {"queue_databases": {"reports": "nowhere"}}})
    [error] = list(missing.check())
    assert error.id == "forkq.E001" and "'nowhere'" in error.msg and "queue_databases" in error.msg
