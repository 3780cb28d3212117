"""The dashboard over two databases, where the first version went wrong: a database that
accepts connections and then says nothing must not hold every page for the page timeout,
an action's log line and message name the job's database (ids repeat across databases),
and a schedule added without a queue is kept where its handler's queue lives."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from databases_util import (
    databases_toml,
    reports_url_fixture,  # noqa: F401  (the `reports_url` fixture)
)
from util import free_tcp_port
from webutil import TOKEN, ServerFactory, WebServer, csrf_of
from werkzeug.test import Client

from supervisor import Queue, registry
from supervisor.config import load_config
from supervisor.store import Store, open_store
from supervisor.web.app import make_app_from_config
from supervisor.web.databases import DB_TIMEOUT

PASSWORD = "sekrit-pw-4711"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never says a word (a hung server)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            held.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in held:
        conn.close()


def app_client(
    tmp_path: Path, home_url: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> Client:
    """The dashboard in this process, without a token: a browser's session is logged in."""
    config = tmp_path / "review.toml"
    config.write_text(f'[database]\nurl = "{home_url}"\n[pools.email]\nworkers = 1\n{extra}')
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)
    return Client(make_app_from_config(load_config(str(config)), token=None))


def test_a_database_that_says_nothing_costs_a_page_a_short_probe_not_the_page_timeout(
    db_url: str, silent_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hung = f"mysql://forkq:{PASSWORD}@127.0.0.1:{silent_port}/reports"
    client = app_client(tmp_path, db_url, databases_toml(hung), monkeypatch)
    # Before: the overview asked it on the page's own connection and waited DB_TIMEOUT
    # (30 s) for a word; then each of its pages waited as long again.
    for path in ["/", "/jobs?db=reports", "/queues?db=reports"]:
        started = time.monotonic()
        answer = client.get(path)
        waited = time.monotonic() - started
        html = answer.get_data(as_text=True)
        assert answer.status_code == (200 if path == "/" else 503), (path, html)
        assert "database reports does not answer" in html and PASSWORD not in html
        assert waited < DB_TIMEOUT / 2, (path, waited)


def test_an_action_on_the_second_database_names_it_in_its_log_line_and_message(
    web_server: ServerFactory, store: Store, reports_url: str
) -> None:
    reports = open_store(reports_url)
    try:
        home_id = Queue(store=store).enqueue("mail.send", {}, queue="email")
        job_id = Queue(store=reports).enqueue("report.build", {}, queue="reports")
        server = web_server(token=TOKEN, extra=databases_toml(reports_url))
        code = server.request(
            f"/jobs/reports:{job_id}/cancel",
            data={"next": f"/jobs/reports:{job_id}"},
            headers=server.bearer(),
        )[0]
        assert code == 303
        assert str(reports.get_job(job_id).status) == "cancelled"  # type: ignore[union-attr]
        assert str(store.get_job(home_id).status) == "ready"  # type: ignore[union-attr]
        # ids are per database (both may hold a job 1): the log line must say which one
        (line,) = logged(server, "cancel")
        assert line["database"] == "reports" and line["ids"] == [job_id], line
        form = {"action": "retry", "q": "status:cancelled", "confirmed": "yes"}
        server.request("/jobs/bulk?db=reports", data=form, headers=server.bearer())
        (line,) = logged(server, "bulk_retry")
        assert line["database"] == "reports" and line["changed"] == 1, line
    finally:
        reports.close()


def logged(server: WebServer, action: str) -> list[dict[str, Any]]:
    entries = [json.loads(x) for x in server.log.read_text().splitlines() if x.startswith("{")]
    return [e for e in entries if e.get("action") == action]


def test_a_schedule_without_a_queue_is_kept_where_its_handlers_queue_lives(
    db_url: str,
    store: Store,
    reports_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "_HANDLERS", dict(registry._HANDLERS))
    registry.handler("review.monthly", queue="reports")(lambda payload, job: None)
    client = app_client(tmp_path, db_url, databases_toml(reports_url), monkeypatch)
    csrf = csrf_of(client.get("/schedules").get_data(as_text=True))
    fields = {"name": "monthly", "cron": "0 5 1 * *", "handler": "review.monthly", "csrf": csrf}
    answer = client.post("/schedules/add", data=fields)  # from the home database's page
    assert answer.status_code == 303
    reports = open_store(reports_url)
    try:
        # Before: kept at home, whose daemons would enqueue its jobs into queue reports
        # of the home database, which no daemon works (forkq schedule add puts it there).
        assert [s.name for s in reports.runtime_schedules()] == ["monthly"]
        assert store.runtime_schedules() == []
    finally:
        reports.close()


def test_finding_a_job_of_a_database_that_does_not_answer_never_blames_this_one(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = free_tcp_port()
    down = f"mysql://forkq:{PASSWORD}@127.0.0.1:{closed}/reports"
    client = app_client(tmp_path, db_url, databases_toml(down), monkeypatch)
    # Before: 503 "database default does not answer", and every page said so for 30 s.
    answer = client.get("/jobs?find=reports:1")
    assert answer.status_code == 303
    assert answer.headers["Location"].endswith("/jobs/reports:1")  # which says why: 503
    answer = client.get("/dead")
    html = answer.get_data(as_text=True)
    assert answer.status_code == 200 and "database default does not answer" not in html
    assert "database reports does not answer" in html and PASSWORD not in html


def test_the_login_page_is_served_and_tells_nothing_while_a_database_is_down(
    reports_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "login.toml"
    down = f"mysql://forkq:{PASSWORD}@127.0.0.1:{free_tcp_port()}/app"
    config.write_text(f'[database]\nurl = "{down}"\n' + databases_toml(reports_url))
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)
    client = Client(make_app_from_config(load_config(str(config)), token=TOKEN))
    answer = client.get("/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 503  # the home database is known down from here on
    answer = client.get("/login")  # no session, no token: a stranger
    html = answer.get_data(as_text=True)
    assert answer.status_code == 200 and 'name="token"' in html
    assert "reports" not in html and "does not answer" not in html
