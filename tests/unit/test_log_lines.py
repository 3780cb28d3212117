"""The `job_finished` line of a job done is written past structlog (logs.done_line): it
must be the line structlog writes, key for key and in the same order, and step aside
wherever structlog's line would differ."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog
import structlog.testing

from supervisor import events, logs
from supervisor.models import JobRow, JobState
from supervisor.outcomes import Attempt, Outcome
from supervisor.work.attempt import log_finished

DONE = Attempt(Outcome.DONE, None, None, False)


@pytest.fixture(autouse=True)
def _process_context() -> Iterator[None]:
    """Each test binds its own context and sets logging up; both are put back after."""
    saved, sticky = dict(logs._PROCESS_CONTEXT), dict(logs._STICKY)
    config, done_lines = structlog.get_config(), logs._DONE_LINES
    yield
    logs._STICKY.clear()
    logs._STICKY.update(sticky)
    logs.bind(**{k: v for k, v in saved.items() if k not in sticky})
    structlog.configure(**config)
    logs._DONE_LINES = done_lines


def _row(handler: str = "mail.send", queue: str = "email") -> JobRow:
    now = datetime.now(UTC)
    return JobRow(
        id=4_000_000_123, queue=queue, handler=handler, payload="{}", status=JobState.RUNNING,
        priority=0, run_at=now, attempts=3, max_attempts=None, unique_key=None,
        locked_by=None, locked_until=None, last_error=None, enqueued_at=now,
        started_at=now, finished_at=None,
    )  # fmt: skip


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def _both_ways(
    capsys: pytest.CaptureFixture[str], row: JobRow, duration: float = 0.01234567
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The line written the quick way, then the same line through structlog."""
    capsys.readouterr()
    names = (events.JOB_FINISHED, row.id, row.handler, row.queue, row.attempts)
    assert logs.done_line(logs.get(), *names, round(duration, 4))  # it took the quick way
    quick = capsys.readouterr().out
    saved, logs._DONE_LINES = logs._DONE_LINES, None  # as with a level above info
    try:
        log_finished(logs.get(), row, DONE, Outcome.DONE, duration)
    finally:
        logs._DONE_LINES = saved
    slow = capsys.readouterr().out
    assert quick.count("\n") == slow.count("\n") == 1
    return _lines(quick)[0], _lines(slow)[0]


def _same_but_the_time(quick: dict[str, Any], slow: dict[str, Any]) -> None:
    assert list(quick) == list(slow)  # the same keys, in the same order
    assert {k: v for k, v in quick.items() if k != "timestamp"} == {
        k: v for k, v in slow.items() if k != "timestamp"
    }


def test_the_quick_line_is_structlogs_line(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup("info", json_lines=True)
    logs.stick(database="alpha")
    logs.bind(role="worker", pool="email", pid=os.getpid(), slot=2)
    quick, slow = _both_ways(capsys, _row())
    _same_but_the_time(quick, slow)
    assert quick["event"] == events.JOB_FINISHED and quick["outcome"] == "done"
    assert quick["duration"] == 0.0123 and quick["attempt"] == 3
    assert quick["job_id"] == 4_000_000_123 and quick["database"] == "alpha"


def test_names_from_a_row_are_escaped_as_structlog_escapes_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.setup("info", json_lines=True)
    logs.bind(role="worker", pool="q", pid=1, slot=1)
    for handler in ('say "hi"\n', "a, b", "naïve\x1b[2J", "x" * 191):
        quick, slow = _both_ways(capsys, _row(handler=handler, queue=handler[:64]))
        _same_but_the_time(quick, slow)
        assert quick["handler"] == handler


def test_a_secret_looking_context_key_is_masked_the_same(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.setup("info", json_lines=True)
    logs.bind(role="worker", pool="q", pid=1, api_token="s3cr3t")
    quick, slow = _both_ways(capsys, _row())
    _same_but_the_time(quick, slow)
    assert quick["api_token"] == "***"
    assert "s3cr3t" not in json.dumps(quick)


def test_log_finished_writes_a_done_line_the_quick_way(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    logs.setup("info", json_lines=True)
    logs.bind(role="worker", pool="q", pid=1)
    taken: list[bool] = []
    quick = logs.done_line

    def spy(*args: Any) -> bool:
        taken.append(quick(*args))
        return taken[-1]

    monkeypatch.setattr(logs, "done_line", spy)
    log_finished(logs.get(), _row(), DONE, Outcome.DONE, 0.001)
    assert taken == [True]
    assert _lines(capsys.readouterr().out)[0]["event"] == events.JOB_FINISHED


def test_a_rebind_changes_the_context_of_the_next_quick_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.setup("info", json_lines=True)
    logs.bind(role="worker", pool="q", pid=1, slot=1)
    log_finished(logs.get(), _row(), DONE, Outcome.DONE, 0.001)
    logs.bind(role="worker", pool="q", pid=2, slot=1)  # a child after its fork
    log_finished(logs.get(), _row(), DONE, Outcome.DONE, 0.001)
    assert [line["pid"] for line in _lines(capsys.readouterr().out)] == [1, 2]


def test_where_structlogs_line_would_differ_it_writes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line_of = (events.JOB_FINISHED, 1, "h", "q", 1)
    logs.setup("info", json_lines=True)
    logs.bind(role="worker", queue="bound")  # a context key the line has too
    assert not logs.done_line(logs.get(), *line_of, 0.0)
    log_finished(logs.get(), _row(), DONE, Outcome.DONE, 0.001)
    (line,) = _lines(capsys.readouterr().out)
    assert line["queue"] == "email"  # the line's own value, as structlog keeps it

    logs.bind(role="worker", pool="q")
    assert not logs.done_line(logs.get(job_id=7), *line_of, 0.0)  # bound context
    assert not logs.done_line(logs.get(), *line_of, float("inf"))  # not JSON
    logs.setup("warning", json_lines=True)  # info lines are dropped: by structlog
    assert not logs.done_line(logs.get(), *line_of, 0.0)
    logs.setup("info", json_lines=False)  # a terminal's key=value lines
    assert not logs.done_line(logs.get(), *line_of, 0.0)
    assert capsys.readouterr().out == ""


def test_structlog_configured_by_another_gets_the_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.setup("info", json_lines=True)
    with structlog.testing.capture_logs() as captured:  # as an application's tests do
        log_finished(logs.get(), _row(), DONE, Outcome.DONE, 0.001)
    assert [e["event"] for e in captured] == [events.JOB_FINISHED]
    structlog.configure(processors=[structlog.processors.JSONRenderer()])  # its own setup
    log_finished(logs.get(), _row(), DONE, Outcome.DONE, 0.001)
    (line,) = _lines(capsys.readouterr().out)
    assert "level" not in line and line["outcome"] == "done"  # its processors, not ours


def test_other_outcomes_keep_structlogs_line(capsys: pytest.CaptureFixture[str]) -> None:
    logs.setup("info", json_lines=True)
    logs.bind(role="worker", pool="q", pid=1)
    failed = Attempt(Outcome.RETRY, "ValueError: nope\nmore", None, False)
    log_finished(logs.get(), _row(), failed, Outcome.RETRY, 0.5)
    snoozed = Attempt(Outcome.SNOOZED, None, 30.0, False)
    log_finished(logs.get(), _row(), snoozed, Outcome.SNOOZED, 0.5)
    retry, snooze = _lines(capsys.readouterr().out)
    assert retry["level"] == "warning" and retry["error"] == "ValueError: nope"
    assert snooze["level"] == "info" and snooze["delay"] == 30.0
