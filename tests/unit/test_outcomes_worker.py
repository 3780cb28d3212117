"""The outcome a worker reports for an attempt is what became of the job (issue 13).

A handler that fails on its job's last attempt asks for nothing but another try, yet the
job ends dead: the `job_finished` log line, the metric, the event to the master (the
scoreboard's failed count, the process title) and `run_job`'s answer say `dead`, as
the row does. Outcomes are `Outcome` members from the handler to the log line.

A throwaway SQLite store (the shared `sqlite_db_url` fixture) and `Worker.work_once`
in-process: the outcome is decided and reported in the worker, the same on both backends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from supervisor import Fail, Retry, Snooze, events, registry
from supervisor.config import Config, PoolConfig
from supervisor.dburl import parse_database_url
from supervisor.models import JobRow, JobState, NewJob
from supervisor.observe import metrics
from supervisor.outcomes import Outcome
from supervisor.store import open_store
from supervisor.work.events import NoEvents
from supervisor.work.worker import Worker

pytestmark = pytest.mark.timeout(60, method="thread")  # the worker's soft timeout owns SIGALRM

QUEUE = "outcomes"
OWNER = "test:1:outcomes"


class Recorded(NoEvents):
    """The worker's events, as the master's pipe and the process title would get them."""

    def __init__(self) -> None:
        self.finished: list[tuple[int, Outcome]] = []

    def job_started(self, job: JobRow, timeout: float) -> None:
        pass

    def job_ran(self, job: JobRow) -> None:
        pass

    def job_finished(self, job: JobRow, outcome: Outcome) -> None:
        self.finished.append((job.id, outcome))

    def idle(self) -> None:
        pass


def crashes(payload: Any, job: Any) -> None:
    raise RuntimeError("the mail server said no")


def asks_again(payload: Any, job: Any) -> None:
    raise Retry(5, "not yet")


def gives_up(payload: Any, job: Any) -> None:
    raise Fail("bad address")


def snoozes(payload: Any, job: Any) -> None:
    raise Snooze(60, "waiting for the report")


def succeeds(payload: Any, job: Any) -> None:
    pass


HANDLERS = {
    "t.outcomes.crashes": crashes,
    "t.outcomes.asks_again": asks_again,
    "t.outcomes.gives_up": gives_up,
    "t.outcomes.snoozes": snoozes,
    "t.outcomes.succeeds": succeeds,
}


@pytest.fixture
def worker(sqlite_db_url: str) -> Iterator[Worker]:
    """A worker of QUEUE over a new SQLite file, its events recorded, with HANDLERS."""
    for name, func in HANDLERS.items():
        registry.handler(name, queue=QUEUE)(func)
    store = open_store(sqlite_db_url)
    config = Config(
        database=parse_database_url(sqlite_db_url),
        pools=(PoolConfig(name=QUEUE, timeout=30, on_success="keep"),),
    )
    yield Worker(store, config, [QUEUE], OWNER, Recorded())
    store.close()
    for name in HANDLERS:
        registry._HANDLERS.pop(name, None)  # the registry is process-wide


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """What the worker hands to the metrics, (queue, handler, outcome) per attempt."""
    calls: list[tuple[str, str, str]] = []

    def job_finished(queue: str, handler: str, outcome: str, seconds: float) -> None:
        calls.append((queue, handler, outcome))

    monkeypatch.setattr(metrics, "job_finished", job_finished)
    return calls


def run_one(worker: Worker, handler: str, max_attempts: int) -> tuple[Outcome, dict[str, Any]]:
    """Enqueue one job and work it; (the outcome the events got, its log line)."""
    job_id = worker.store.enqueue(NewJob(handler, "{}", queue=QUEUE, max_attempts=max_attempts))
    with structlog.testing.capture_logs() as captured:
        assert worker.work_once() == 1
        worker.flush()
    [line] = [e for e in captured if e["event"] == events.JOB_FINISHED]
    assert isinstance(worker.events, Recorded)
    [(finished_id, outcome)] = worker.events.finished
    assert finished_id == line["job_id"] == job_id
    return outcome, line


def status(worker: Worker) -> JobState:
    """The status of the one job `worker` ran, as stored."""
    assert isinstance(worker.events, Recorded)
    [(job_id, _)] = worker.events.finished
    job = worker.store.get_job(job_id)
    assert job is not None
    return job.status


@pytest.mark.parametrize("handler", ["t.outcomes.crashes", "t.outcomes.asks_again"])
def test_a_failure_on_the_last_attempt_is_reported_dead_not_retry(
    worker: Worker, counted: list[tuple[str, str, str]], handler: str
) -> None:
    outcome, line = run_one(worker, handler, max_attempts=1)
    assert status(worker) == JobState.DEAD  # the fate: no attempt left
    assert line["outcome"] == "dead"
    assert line["log_level"] == "warning"
    assert counted == [(QUEUE, handler, "dead")]
    assert outcome is Outcome.DEAD


@pytest.mark.parametrize("handler", ["t.outcomes.crashes", "t.outcomes.asks_again"])
def test_a_failure_with_attempts_left_is_reported_retry(
    worker: Worker, counted: list[tuple[str, str, str]], handler: str
) -> None:
    outcome, line = run_one(worker, handler, max_attempts=3)
    assert status(worker) in (JobState.READY, JobState.SCHEDULED)
    assert line["outcome"] == "retry"
    assert counted == [(QUEUE, handler, "retry")]
    assert outcome is Outcome.RETRY


@pytest.mark.parametrize(
    ("handler", "expected", "states"),
    [
        ("t.outcomes.gives_up", Outcome.DEAD, {JobState.DEAD}),
        ("t.outcomes.snoozes", Outcome.SNOOZED, {JobState.READY, JobState.SCHEDULED}),
        ("t.outcomes.succeeds", Outcome.DONE, {JobState.DONE}),
    ],
)
def test_each_outcome_is_an_outcome_member_logged_and_counted_by_its_word(
    worker: Worker,
    counted: list[tuple[str, str, str]],
    handler: str,
    expected: Outcome,
    states: set[JobState],
) -> None:
    outcome, line = run_one(worker, handler, max_attempts=5)
    assert status(worker) in states
    assert line["outcome"] == expected.value  # the log's and the metric's words as before
    assert counted == [(QUEUE, handler, expected.value)]
    assert outcome is expected
