"""`[databases.NAME]` (issue 24, item 2; serving it is not built yet): what is read and
checked, and that the section is refused with exit 78 until forkq serves it, so queues
listed there are never claimed from the wrong database."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor.config import NOT_SERVED_YET, build_config
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


def test_the_section_is_refused_until_forkq_serves_it_every_problem_listed() -> None:
    raw = {
        "database": {"url": "mysql://u:p@db1/app"},
        "databases": {"reports": {"url": "mysql://u:p@db4/reports", "queues": []}},
    }
    with pytest.raises(ConfigError) as caught:
        build_config(raw, "test.toml")
    assert NOT_SERVED_YET in str(caught.value)
    assert "databases.reports.queues" in str(caught.value)
