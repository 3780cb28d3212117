"""Django tasks over two databases run by real daemons, one per database (each a forkq
config of that database alone, `handlers = ["supervisor.contrib.django"]`): the "routed"
backend of the test project writes queue "reports" on the alias "reports_db", the daemon
of that database runs it and writes its result there, where get_result reads it."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from daemon_util import Daemon, daemons_fixture  # noqa: F401 (fixture)
from databases_util import reports_url_fixture  # noqa: F401  (the `reports_url` fixture)
from django_util import (
    DAEMON_SUPERVISOR,
    daemon_env,
    django_db_fixture,  # noqa: F401 (fixture)
    point_django_at,
    shop_fixture,  # noqa: F401 (fixture)
)
from util import count_rows, wait_until

pytestmark = pytest.mark.usefixtures("django_db")


@pytest.fixture(name="reports_db")
def reports_db_fixture(django_db: str, reports_url: str) -> Iterator[str]:
    point_django_at(reports_url, "reports_db")
    yield reports_url
    from django.db import connections

    connections.close_all()


def test_each_database_has_its_daemon_and_its_results(
    daemons: Callable[..., Daemon],
    tmp_path: Path,
    db_url: str,
    reports_db: str,
    shop: ModuleType,
) -> None:
    env = daemon_env(tmp_path, db_url, FORKQ_DJANGO_REPORTS_URL=reports_db)
    home = daemons(
        name="home", pools={"default": {"workers": 1}}, supervisor=DAEMON_SUPERVISOR, env=env
    )
    reports = daemons(
        name="reports",
        db_url=reports_db,
        pools={"reports": {"workers": 1}},
        supervisor=DAEMON_SUPERVISOR,
        env=env,
    )
    home.start().wait_ready()
    reports.start().wait_ready()
    from supervisor.contrib import django_compat

    backend = django_compat.task_backends["routed"]
    added = shop.add.using(backend="routed").enqueue(2, 3)
    report = shop.report.using(backend="routed").enqueue("weekly", rows=[1])

    def finished(result_id: str) -> Any:
        result = backend.get_result(result_id)
        return result if result.is_finished else None

    done = wait_until(lambda: finished(report.id), timeout=30, message="the report task ran")
    assert done.status == django_compat.TaskResultStatus.SUCCESSFUL
    pids = {f"{socket.gethostname()}:{p}" for p in reports.pool_children("reports")}
    assert f"{socket.gethostname()}:{done.return_value['pid']}" in pids
    assert wait_until(lambda: finished(added.id), timeout=30, message="add ran").return_value == 5
    assert count_rows(reports_db, "forkq_results") == 1  # written where the job lived
    assert count_rows(db_url, "forkq_results") == 1
