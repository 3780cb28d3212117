"""The dashboard over two databases (`[databases.reports]`), on both backends: every page
names its database, a job of the second is `/jobs/reports:ID` and its actions change that
database only (ids are per database: both may hold a job 1), and a database that does not
answer is named on every page while the other is served."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from databases_util import (
    databases_toml,
    reports_url_fixture,  # noqa: F401  (the `reports_url` fixture)
)
from test_actions import click, dead_jobs, status
from util import free_tcp_port
from webutil import ServerFactory, csrf_of

from supervisor import Queue
from supervisor.models import JobState
from supervisor.store import Store, open_store

PASSWORD = "sekrit-pw-4711"  # a down database's URL carries it: no page may show it
PAGES = [
    "/",
    "/jobs",
    "/dead",
    "/running",
    "/queues",
    "/processes",
    "/schedules",
    "/handlers",
    "/alerts",
    "/locks",
]


@pytest.fixture
def reports(reports_url: str) -> Iterator[Store]:
    store = open_store(reports_url)
    yield store
    store.close()


def test_each_database_has_its_pages_and_a_job_is_named_by_its_database(
    web_server: ServerFactory, queue: Queue, store: Store, reports_url: str, reports: Store
) -> None:
    home_id = queue.enqueue("mail.send", {"to": "a"}, queue="email")
    (dead_id,) = dead_jobs(Queue(store=reports), reports, 1)
    server = web_server(extra=databases_toml(reports_url))

    code, html, _ = server.request("/")
    assert code == 200
    assert re.search(r'<tr data-database="default">.*?</tr>', html, re.S)
    row = re.search(r'<tr data-database="reports">(.*?)</tr>', html, re.S)
    assert row and "does not answer" not in row.group(1)

    code, html, _ = server.request("/jobs?db=reports")
    assert code == 200 and "report.build" in html and "mail.send" not in html
    assert f'href="/jobs/reports:{dead_id}"' in html
    code, html, _ = server.request("/jobs")
    assert code == 200 and "mail.send" in html and "report.build" not in html
    assert f'href="/jobs/{home_id}"' in html

    code, html, _ = server.request(f"/jobs/reports:{dead_id}")
    assert code == 200 and "report.build" in html and "boom" in html
    assert f'action="/jobs/reports:{dead_id}/retry"' in html
    assert server.request(f"/jobs/{home_id}")[1].count("mail.send") >= 1
    assert server.request(f"/jobs/nowhere:{dead_id}")[0] == 404
    assert server.request("/jobs?db=nowhere")[0] == 404
    for path in PAGES:
        code, html, _ = server.request(f"{path}?db=reports" if "?" not in path else path)
        assert code == 200, (path, html)
        assert 'aria-current="true">reports</a>' in html, path

    # find: reports:ID leads to that job's page
    code, _, headers = server.request(f"/jobs?find=reports:{dead_id}")
    assert code == 303 and headers["Location"].endswith(f"/jobs/reports:{dead_id}")

    # The retry goes to reports' job, never to the home job of the same id.
    page = server.request(f"/jobs/reports:{dead_id}")[1]
    form = {"csrf": csrf_of(page), "next": f"/jobs/reports:{dead_id}"}
    code, _, headers = server.request(f"/jobs/reports:{dead_id}/retry", data=form)
    assert code == 403  # no session cookie with that CSRF token: refused as today
    assert status(reports, dead_id) == JobState.DEAD


def test_actions_on_a_list_of_the_second_database_change_it_alone(
    page: Any, web_server: ServerFactory, store: Store, reports_url: str, reports: Store
) -> None:
    home_dead = dead_jobs(Queue(store=store), store, 2)
    reports_dead = dead_jobs(Queue(store=reports), reports, 2)
    server = web_server(extra=databases_toml(reports_url))
    page.goto(f"{server.url}/dead?db=reports&queue=reports")
    click(page, "retry all")
    assert [status(reports, i) for i in reports_dead] == [JobState.READY] * 2
    assert [status(store, i) for i in home_dead] == [JobState.DEAD] * 2
    assert "db=reports" in page.url


def test_a_job_of_the_second_database_is_retried_from_its_page_in_a_browser(
    page: Any, web_server: ServerFactory, store: Store, reports_url: str, reports: Store
) -> None:
    home_dead = dead_jobs(Queue(store=store), store, 1)  # must stay dead
    (dead_id,) = dead_jobs(Queue(store=reports), reports, 1)
    server = web_server(extra=databases_toml(reports_url))
    page.goto(f"{server.url}/jobs/reports:{dead_id}")
    assert page.inner_text("nav.databases a.here") == "reports"
    click(page, "retry")
    assert status(reports, dead_id) == JobState.READY
    assert f"job {dead_id} will run again" in page.inner_text(".flash")
    assert page.url.endswith(f"/jobs/reports:{dead_id}")
    assert status(store, home_dead[0]) == JobState.DEAD


def test_a_database_that_does_not_answer_is_named_and_the_other_is_served(
    web_server: ServerFactory, queue: Queue
) -> None:
    home_id = queue.enqueue("mail.send", {"to": "a"}, queue="email")
    closed = free_tcp_port()  # nothing listens there
    down = f"mysql://forkq:{PASSWORD}@127.0.0.1:{closed}/reports"
    server = web_server(extra=databases_toml(down))
    for path in PAGES:
        code, html, _ = server.request(path)
        assert code == 200, (path, html)
        assert 'data-database="reports">database reports does not answer' in html, path
        assert PASSWORD not in html
    html = server.request("/jobs")[1]
    assert "mail.send" in html
    assert server.request(f"/jobs/{home_id}")[0] == 200
    for path in ["/jobs?db=reports", f"/jobs/reports:{home_id}", "/queues?db=reports"]:
        code, html, _ = server.request(path)
        assert code == 503, (path, html)
        assert "database reports does not answer" in html and PASSWORD not in html
    assert PASSWORD not in server.log.read_text()
