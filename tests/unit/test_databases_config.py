"""`[databases.NAME]` (issue 24, item 2): what is read and checked, and each database's
own config (`Config.for_database`)."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.config import HOME_DATABASE, build_config
from supervisor.config.databases import HOME, check_limits, database_of, read_databases
from supervisor.config.model import LimitConfig
from supervisor.config.sections import Problems
from supervisor.errors import ConfigError

GALERA = ["mysql://u:p@db5/r", "mysql://u:p@db6/r"]


def read(table: Any) -> tuple[Any, list[str]]:
    problems = Problems("test.toml")
    return read_databases(table, problems), problems.items


def test_named_databases_and_where_each_queue_lives() -> None:
    found, problems = read(
        {
            "reports": {"url": "mysql://u:p@db4/reports", "queues": ["reports", "pdf"]},
            "mail": {"nodes": GALERA, "queues": ["mail"]},
        }
    )
    assert problems == []
    assert [(d.name, d.url.host, d.queues) for d in found] == [
        ("reports", "db4", ("reports", "pdf")),
        ("mail", "db5", ("mail",)),
    ]
    assert len(found[1].url.nodes) == 2
    assert database_of(found, "pdf") == "reports" and database_of(found, "other") == HOME


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"a": {"url": "mysql://u:p@h/a"}}, "databases.a.queues: expected the queues"),
        ({"a": {"queues": ["q"]}}, "databases.a.url: expected url"),
        ({"a": {"url": "nope", "queues": ["q"]}}, "databases.a.url: database url must look"),
        ({"a": {"nodes": ["sqlite:///x.db"], "queues": ["q"]}}, "databases.a.nodes: every node"),
        (
            {"a": {"url": "mysql://u:p@h/a", "queues": ["q"]},
             "b": {"url": "mysql://u:p@i/b", "queues": ["q"]}},
            "databases.b.queues: queue 'q' is in databases.a too",
        ),
        ({"a": {"url": "mysql://u:p@h/a", "queues": ["q"], "pool": 1}}, "databases.a.pool"),
        ({"a": "mysql://u:p@h/a"}, "databases.a: expected a table"),
    ],
)  # fmt: skip
def test_bad_entries_are_named(table: Any, says: str) -> None:
    _, problems = read(table)
    assert any(says in p for p in problems), problems
    assert not any(":p@" in p for p in problems)  # never a password


def test_a_limit_spanning_two_databases_is_refused() -> None:
    found, _ = read({"reports": {"url": "mysql://u:p@db4/reports", "queues": ["pdf"]}})
    problems = Problems("test.toml")
    limits = (
        LimitConfig(name="ok", queues=("pdf",), concurrency=2),
        LimitConfig(name="home", queues=("a", "b"), concurrency=2),
        LimitConfig(name="across", queues=("a", "pdf"), concurrency=2),
    )
    check_limits(found, limits, problems)
    assert problems.items == [
        "test.toml: limits.across.queues: its queues are in [database] and reports:"
        " a limit covers queues of one database"
    ]


def test_each_database_gets_its_own_config() -> None:
    raw = {
        "database": {"url": "mysql://u:p@db1/app"},
        "databases": {"reports": {"url": "mysql://u:p@db4/reports", "queues": ["pdf"]}},
        "pools": {"default": {"workers": 2}, "pdf": {"workers": 3}},
        "limits": {
            "pdfs": {"queues": ["pdf"], "concurrency": 1},
            "home": {"queues": ["default"], "concurrency": 1},
            "mailer": {"handlers": ["send"], "concurrency": 1},
        },
        "schedules": {
            "nightly": {"cron": "0 3 * * *", "handler": "render", "queue": "pdf"},
            "hourly": {"cron": "0 * * * *", "handler": "render"},
        },
    }
    config = build_config(raw, "test.toml")
    assert [n for n, _ in config.every_database()] == [HOME_DATABASE, "reports"]
    assert config.url_for_queue("pdf").host == "db4" and config.url_for_queue("x").host == "db1"
    reports = config.for_database("reports", queue_of_handler=lambda h: "pdf")
    assert reports.database.host == "db4" and reports.database_name == "reports"
    assert [p.name for p in reports.pools] == ["pdf"]
    assert sorted(lim.name for lim in reports.limits) == ["mailer", "pdfs"]
    assert sorted(s.name for s in reports.schedules) == ["hourly", "nightly"]
    assert reports.databases == ()
    home = config.for_database(HOME_DATABASE)
    assert [p.name for p in home.pools] == ["default"]
    assert sorted(lim.name for lim in home.limits) == ["home", "mailer"]
    assert [s.name for s in home.schedules] == ["hourly"]


def test_a_named_database_url_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKQ_DATABASE_URL_REPORTS", "mysql://u:secret@db9/reports")
    found, problems = read({"reports": {"url": "mysql://u@db4/reports", "queues": ["pdf"]}})
    assert problems == [] and found[0].url.host == "db9"


@pytest.mark.parametrize("name", ["default", "bad-name"])
def test_names_that_cannot_be_a_database(name: str) -> None:
    _, problems = read({name: {"url": "mysql://u:p@db4/r", "queues": ["pdf"]}})
    assert problems and problems[0].startswith(f"test.toml: databases.{name}:"), problems


def test_every_problem_is_listed_at_once() -> None:
    raw = {
        "database": {"url": "mysql://u:p@db1/app"},
        "databases": {"reports": {"url": "mysql://u:p@db4/reports", "queues": []}},
        "limits": {"x": {"queues": ["a"], "concurrency": 0}},
    }
    with pytest.raises(ConfigError) as caught:
        build_config(raw, "test.toml")
    assert "databases.reports.queues" in str(caught.value)
    assert "limits.x" in str(caught.value)


@pytest.mark.parametrize(
    ("home", "other"),
    [
        ("mysql://u:p@db1/app", "mysql://v:q@DB1:3306/app"),
        ("sqlite:///tmp/a.db", "sqlite:///tmp/../tmp/a.db"),
    ],
)
def test_a_second_name_for_one_database_is_refused(home: str, other: str) -> None:
    raw = {"database": {"url": home}, "databases": {"x": {"url": other, "queues": ["q"]}}}
    with pytest.raises(ConfigError, match=r"databases\.x: it is the database of \[database\] too"):
        build_config(raw, "test.toml")
    raw["databases"]["x"]["url"] = other.replace("app", "reports").replace("a.db", "b.db")
    assert build_config(raw, "test.toml").databases[0].name == "x"
