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


def test_a_result_is_found_past_a_plain_forkq_job_of_the_same_id_in_the_first_database(
    shop: ModuleType, db_url: str, reports_db: str
) -> None:
    from supervisor import Queue

    ids = {Queue(db_url, wake=False).enqueue("mail.send", {"to": "a"}, queue="email")}
    report = shop.report.using(backend="routed").enqueue("monthly")
    ids.add(int(report.id.partition("-")[0]))
    backend = api().task_backends["routed"]
    # Before: the home database's job of that id (no Django task) ended the search there,
    # TaskResultDoesNotExist, when the task's own row waited in reports_db.
    assert len(ids) == 1 or db_url.startswith("mysql")  # both job 1 on fresh SQLite files
    assert backend.get_result(report.id).args == ["monthly"]


def break_transaction(alias: str) -> None:
    """An IntegrityError caught inside the open atomic block on `alias`, as a view that
    catches a failed Model.save() meets it: Django marks the block for rollback."""
    from django.db import IntegrityError, connections, transaction

    insert = "INSERT INTO forkq_queues (queue, paused) VALUES (%s, 0)"
    with connections[alias].cursor() as cursor:
        cursor.execute(insert, ["dup"])
        with pytest.raises(IntegrityError), transaction.mark_for_rollback_on_error(using=alias):
            cursor.execute(insert, ["dup"])
    assert connections[alias].needs_rollback


def test_a_broken_transaction_hides_only_the_results_its_database_may_hold(
    shop: ModuleType, db_url: str, reports_db: str
) -> None:
    from django.db import transaction
    from django.db.transaction import TransactionManagementError

    added = shop.add.using(backend="routed").enqueue(1, 2)
    report = shop.report.using(backend="routed").enqueue("weekly")
    backend = api().task_backends["routed"]
    unknown = report.id.partition("-")[0] + "-0000"
    for broken, healthy in (("default", report), ("reports_db", added)):
        hidden = added if broken == "default" else report
        with transaction.atomic(using=broken):
            break_transaction(broken)
            # Before: TransactionManagementError from `broken` for any id, even one whose
            # task waits in the other database, healthy, which Django lets us query.
            assert backend.get_result(healthy.id).args == healthy.args
            healthy.refresh()
            # The task may be in the broken database: Django's rule, no query there.
            for result_id in (hidden.id, unknown):
                with pytest.raises(TransactionManagementError, match=repr(broken)):
                    backend.get_result(result_id)
            with pytest.raises(TransactionManagementError):
                hidden.refresh()
        assert backend.get_result(hidden.id).args == hidden.args  # rolled back: readable
    with pytest.raises(api().TaskResultDoesNotExist):
        backend.get_result(unknown)


def test_a_broken_transaction_stops_only_the_enqueues_into_its_database(
    shop: ModuleType, db_url: str, reports_db: str
) -> None:
    from django.db import transaction
    from django.db.transaction import TransactionManagementError

    routed = shop.report.using(backend="routed")
    with transaction.atomic(using="default"):
        break_transaction("default")
        with transaction.atomic(using="reports_db"):
            kept = routed.enqueue("healthy database")
        with pytest.raises(TransactionManagementError):
            routed.using(queue_name="default").enqueue("broken database")
    assert handlers(reports_db) == [("shop.tasks.report", "reports")]
    assert count_rows(db_url, "forkq_jobs") == 0
    assert api().task_backends["routed"].get_result(kept.id).args == ["healthy database"]


def test_a_plain_job_id_is_not_answered_past_a_broken_database_asked_before(
    shop: ModuleType, db_url: str, reports_db: str
) -> None:
    import json

    from django.db import transaction
    from django.db.transaction import TransactionManagementError

    report = shop.report.using(backend="routed").enqueue("weekly")
    job_id = report.id.partition("-")[0]
    [(text,)] = sql(reports_db, "SELECT payload FROM forkq_jobs WHERE id = ?", [job_id])
    older = {k: v for k, v in json.loads(text).items() if k != "token"}  # an earlier release's
    sql(reports_db, "UPDATE forkq_jobs SET payload = ? WHERE id = ?", [json.dumps(older), job_id])
    backend = api().task_backends["routed"]
    with transaction.atomic(using="default"):
        break_transaction("default")
        # Without a token the id may name a task in "default" too, which would come first.
        with pytest.raises(TransactionManagementError, match="'default'"):
            backend.get_result(job_id)
    assert backend.get_result(job_id).args == ["weekly"]
