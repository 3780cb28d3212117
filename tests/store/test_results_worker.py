"""A worker in-process over the real store (both backends): a success that keeps nothing
runs no statement of the results feature (its ack is batched as before); one that keeps
its result has its value written before that ack; a failure goes into the attempt history.
The store's own statements are counted by name as they run (nothing is faked)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from supervisor import registry
from supervisor.config import Config, PoolConfig
from supervisor.dburl import parse_database_url
from supervisor.models import NewJob
from supervisor.results import JobResult, read_result
from supervisor.store import Store
from supervisor.work.worker import Worker

pytestmark = pytest.mark.timeout(60, method="thread")  # the worker's soft timeout owns SIGALRM

QUEUE = "kept"
RESULT_STATEMENTS = {
    "keep_result",
    "record_attempt",
    "job_attempts",
    "job_result",
    "schema_version",
}


def returns(payload: Any, job: Any) -> Any:
    return {"n": payload["n"] * 2}


def breaks(payload: Any, job: Any) -> Any:
    raise RuntimeError("it broke")


@pytest.fixture
def worker(db_url: str, store: Store) -> Iterator[Worker]:
    registry.handler("t.kept.plain", queue=QUEUE)(returns)
    registry.handler("t.kept.kept", queue=QUEUE, keep_result=True)(returns)
    registry.handler("t.kept.breaks", queue=QUEUE)(breaks)
    config = Config(
        database=parse_database_url(db_url),
        pools=(PoolConfig(name=QUEUE, timeout=30, on_success="delete"),),
    )
    store.schema_version()
    store.has_deps_schema()  # asked once per store (dependencies), never per job
    yield Worker(store, config, [QUEUE], "test:1:kept")
    for name in ("t.kept.plain", "t.kept.kept", "t.kept.breaks"):
        registry._HANDLERS.pop(name, None)  # the registry is process-wide


def run(worker: Worker, monkeypatch: pytest.MonkeyPatch, handler: str) -> tuple[int, list[str]]:
    """Enqueue one job, work it and write what is pending; the statements that ran."""
    store = worker.store
    job_id = store.enqueue(NewJob(handler, '{"n": 21}', queue=QUEUE, max_attempts=3))
    names: list[str] = []
    execute, fetchall = store._execute, store._fetchall

    def counted_execute(name: str, params: dict[str, Any]) -> int:
        names.append(name)
        return execute(name, params)

    def counted_fetchall(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        names.append(name)
        return fetchall(name, params)

    monkeypatch.setattr(store, "_execute", counted_execute)
    monkeypatch.setattr(store, "_fetchall", counted_fetchall)
    try:
        assert worker.work_once() == 1
        worker.flush()
    finally:
        monkeypatch.setattr(store, "_execute", execute)
        monkeypatch.setattr(store, "_fetchall", fetchall)
    return job_id, names


def test_only_jobs_that_keep_a_result_or_fail_pay_for_it(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, plain_names = run(worker, monkeypatch, "t.kept.plain")
    assert plain_names and not RESULT_STATEMENTS & set(plain_names), plain_names
    assert read_result(worker.store, plain) == JobResult(plain, "gone")

    kept, kept_names = run(worker, monkeypatch, "t.kept.kept")
    assert kept_names.count("keep_result") == 1 and "record_attempt" not in kept_names
    written = kept_names.index("keep_result")
    assert any("complete" in n for n in kept_names[written:]), kept_names
    assert read_result(worker.store, kept) == JobResult(kept, "done", True, {"n": 42})

    broken, broken_names = run(worker, monkeypatch, "t.kept.breaks")
    assert broken_names.count("record_attempt") == 1 and "keep_result" not in broken_names
    [attempt] = worker.store.job_attempts(broken)
    assert (attempt["outcome"], attempt["pid"], attempt["host"]) == ("retry", 1, "test")
    assert attempt["error"].startswith("RuntimeError: it broke")
