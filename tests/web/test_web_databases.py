"""The dashboard over two databases (`[databases.reports]`), on both backends: every page
names its database, a job of the second is `/jobs/reports:ID` and its actions change that
database only (ids are per database: both may hold a job 1), and a database that does not
answer is named on every page while the other is served."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from databases_util import (
    databases_toml,
    reports_url_fixture,  # noqa: F401  (the `reports_url` fixture)
)
from test_actions import click, dead_jobs, status
from util import free_tcp_port
from webutil import TOKEN, ServerFactory, csrf_of
from werkzeug.test import Client

from supervisor import Queue
from supervisor.config import load_config
from supervisor.models import JobState
from supervisor.store import Store, open_store
from supervisor.web.app import make_app_from_config

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
    assert f'href="/jobs/reports:{dead_id}">reports:{dead_id}</a>' in html
    code, html, _ = server.request("/jobs")
    assert code == 200 and "mail.send" in html and "report.build" not in html
    assert f'href="/jobs/{home_id}"' in html

    code, html, _ = server.request(f"/jobs/reports:{dead_id}")
    assert code == 200 and "report.build" in html and "boom" in html
    assert f"<h1>Job reports:{dead_id} " in html
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
    assert f"job reports:{dead_id} will run again" in page.inner_text(".flash")
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
    code, body, _ = server.request("/api/status")
    document = json.loads(body)  # forkq status --json's, over every database
    assert code == 200 and PASSWORD not in body
    assert [d["name"] for d in document["databases"]] == ["default", "reports"]
    assert document["unreachable"] == ["reports"]
    assert document["databases"][0]["queues"][0]["queue"] == "email"
    assert PASSWORD not in server.log.read_text()


def test_without_its_home_database_the_dashboard_serves_the_other(
    reports_url: str, reports: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process (the web_server fixture's home is the test's database): the overview of
    a home database that does not answer names it and still sums up the other."""
    (dead_id,) = dead_jobs(Queue(store=reports), reports, 1)
    closed = free_tcp_port()
    config = tmp_path / "down-home.toml"
    config.write_text(
        f'[database]\nurl = "mysql://forkq:{PASSWORD}@127.0.0.1:{closed}/app"\n'
        + databases_toml(reports_url)
    )
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)
    client = Client(make_app_from_config(load_config(str(config)), token=None))
    answer = client.get("/")
    html = answer.get_data(as_text=True)
    assert answer.status_code == 503 and PASSWORD not in html
    assert "database default does not answer" in html
    row = re.search(r'<tr data-database="reports">(.*?)</tr>', html, re.S)
    assert row and '<td class="num bad">1</td>' in row.group(1)  # its dead job
    answer = client.get("/dead?db=reports")
    html = answer.get_data(as_text=True)
    assert answer.status_code == 200 and f'href="/jobs/reports:{dead_id}"' in html
    assert 'data-database="default">database default does not answer' in html


def test_a_schedule_added_for_a_queue_is_kept_in_that_queues_database(
    web_server: ServerFactory, store: Store, reports_url: str, reports: Store
) -> None:
    server = web_server(token=TOKEN, extra=databases_toml(reports_url))
    fields = {"name": "monthly", "cron": "0 5 1 * *", "handler": "report.build"}
    code = server.request(
        "/schedules/add", data={**fields, "queue": "reports"}, headers=server.bearer()
    )[0]
    assert code == 303
    assert [s.name for s in reports.runtime_schedules()] == ["monthly"]
    assert store.runtime_schedules() == []
    html = server.request("/schedules?db=reports", headers=server.bearer())[1]
    assert (
        "monthly" in html
        and "monthly" not in server.request("/schedules", headers=server.bearer())[1]
    )


def test_a_missing_sqlite_file_is_named_down_and_never_created(
    sqlite_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "gone" / "reports.db"
    config = tmp_path / "missing.toml"
    config.write_text(
        f'[database]\nurl = "{sqlite_db_url}"\n' + databases_toml(f"sqlite:///{missing}")
    )
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)
    client = Client(make_app_from_config(load_config(str(config)), token=None))
    html = client.get("/queues").get_data(as_text=True)
    assert f"database reports does not answer: no SQLite database at {missing}" in html
    assert client.get("/queues?db=reports").status_code == 503
    assert not missing.exists()
    # Once it is there, its pages are served and no page names it down any more.
    missing.parent.mkdir()
    created = open_store(f"sqlite:///{missing}")
    created.apply_schema()
    created.close()
    answer = client.get("/queues?db=reports")
    assert answer.status_code == 200
    assert "does not answer" not in answer.get_data(as_text=True)
    assert "does not answer" not in client.get("/queues").get_data(as_text=True)


def test_a_sqlite_file_moved_away_under_the_dashboard_is_said_and_never_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One database: a page already served (this thread's connection open) and the file
    moved away: every page says so (503), none reads the moved file or makes an empty one
    where it was; moved back, it is served again."""
    path = tmp_path / "solo.db"
    created = open_store(f"sqlite:///{path}")
    created.apply_schema()
    created.close()
    config = tmp_path / "solo.toml"
    config.write_text(f'[database]\nurl = "sqlite:///{path}"\n')
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)
    client = Client(make_app_from_config(load_config(str(config)), token=None))
    assert client.get("/jobs").status_code == 200
    path.rename(tmp_path / "solo.db.away")
    for page in ("/jobs", "/queues", "/"):
        answer = client.get(page)
        assert answer.status_code == 503, page
        assert f"no SQLite database at {path}" in answer.get_data(as_text=True)
    assert not path.exists()
    (tmp_path / "solo.db.away").rename(path)
    assert client.get("/jobs").status_code == 200


def test_a_bulk_retry_on_the_second_database_retries_there_alone(
    web_server: ServerFactory, store: Store, reports_url: str, reports: Store
) -> None:
    home_dead = dead_jobs(Queue(store=store), store, 2)
    reports_dead = dead_jobs(Queue(store=reports), reports, 3)
    server = web_server(token=TOKEN, extra=databases_toml(reports_url))
    form = {"action": "retry", "q": "status:dead", "confirmed": "yes", "next": "/jobs?db=reports"}
    code, _, headers = server.request("/jobs/bulk?db=reports", data=form, headers=server.bearer())
    assert code == 303 and headers["Location"].endswith("/jobs?db=reports")
    assert [status(reports, i) for i in reports_dead] == [JobState.READY] * 3
    assert [status(store, i) for i in home_dead] == [JobState.DEAD] * 2
