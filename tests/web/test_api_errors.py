"""The dashboard's API (`/api/...`) answers JSON whatever goes wrong, on both backends: a
database that does not answer is a 503 naming it (never its password), an unknown
database or path a 404, a wrong method a 405; a program never has to parse a page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from databases_util import (
    databases_toml,
    reports_url_fixture,  # noqa: F401  (the `reports_url` fixture)
)
from util import free_tcp_port
from webutil import ServerFactory
from werkzeug.test import Client

from supervisor import Queue
from supervisor.config import load_config
from supervisor.web.app import make_app_from_config

PASSWORD = "sekrit-pw-4711"  # a down database's URL carries it: no answer may show it


def answer_json(code: int, body: str, headers: Any, expected: int) -> dict[str, Any]:
    assert code == expected, (code, body[:500])
    assert headers["Content-Type"].startswith("application/json"), body[:500]
    assert PASSWORD not in body
    document = json.loads(body)
    assert isinstance(document, dict) and document["error"], document
    return document


def down_url() -> str:
    return f"mysql://forkq:{PASSWORD}@127.0.0.1:{free_tcp_port()}/reports"  # nothing there


def test_the_status_of_a_database_that_does_not_answer_is_json(
    web_server: ServerFactory, queue: Queue
) -> None:
    queue.enqueue("mail.send", {}, queue="email")
    server = web_server(extra=databases_toml(down_url()))
    # The first ask finds it down; the second is refused at once (known down): both JSON.
    for _ in range(2):
        document = answer_json(*server.request("/api/status?db=reports"), expected=503)
        assert document["error"].startswith("database reports does not answer: ")
        assert document["name"] == "reports" and document["reachable"] is False
        assert document["database"].startswith("mysql://forkq:***@127.0.0.1:")
    home = json.loads(server.request("/api/status?db=default")[1])
    assert home["queues"][0]["queue"] == "email"  # the other database is served
    document = answer_json(*server.request("/api/status?db=nowhere"), expected=404)
    assert "nowhere" in document["error"]
    answer_json(*server.request("/api/nothing"), expected=404)
    answer_json(*server.request("/api/status", data={"x": "1"}), expected=405)
    assert PASSWORD not in server.log.read_text()


def test_with_one_database_down_the_api_answers_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process: the only database does not answer."""
    config = tmp_path / "down.toml"
    config.write_text(f'[database]\nurl = "{down_url()}"\n')
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)
    client = Client(make_app_from_config(load_config(str(config)), token=None))
    answer = client.get("/api/status")
    body = answer.get_data(as_text=True)
    document = answer_json(answer.status_code, body, answer.headers, expected=503)
    assert document["error"].startswith("database default does not answer: ")
    assert document["name"] == "default"


def test_every_databases_status_names_a_home_database_known_down(
    reports_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`/api/status` without `?db=` reads every database itself: once a page found the home
    one down, it still answers the whole document (200), the home one `unreachable`."""
    config = tmp_path / "down-home.toml"
    config.write_text(f'[database]\nurl = "{down_url()}"\n' + databases_toml(reports_url))
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)
    client = Client(make_app_from_config(load_config(str(config)), token=None))
    assert client.get("/").status_code == 503  # the home page: down, now known so
    answer = client.get("/api/status")
    body = answer.get_data(as_text=True)
    assert answer.status_code == 200, body[:500]
    assert PASSWORD not in body
    document = json.loads(body)
    assert document["unreachable"] == ["default"]
    assert [d["name"] for d in document["databases"]] == ["default", "reports"]
