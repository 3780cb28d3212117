"""Queue.from_config with [databases.NAME]: each job goes to its queue's database
(supervisor/routing.py), named `NAME:ID` outside the home one; nothing spans two."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from util import free_tcp_port, mysql_connect, sqlite_url_for

from supervisor import Enqueued, Queue, Router, handler
from supervisor.config import load_config
from supervisor.errors import ForkqError, UsageError
from supervisor.jobref import JobRef
from supervisor.store import open_store

OWNER = "test-routing"


@handler("routing.report", queue="reports")
def _report(payload: object, job: object) -> None:
    """Registered on queue "reports", which lives in database `reports`."""


@pytest.fixture
def urls(two_db_urls: tuple[str, str]) -> tuple[str, str]:
    return two_db_urls


@pytest.fixture
def config_path(urls: tuple[str, str], tmp_path: Path) -> Path:
    home, reports = urls
    path = tmp_path / "forkq.toml"
    path.write_text(
        f'[database]\nurl = "{home}"\n\n'
        f'[databases.reports]\nurl = "{reports}"\nqueues = ["reports", "pdf"]\n'
    )
    return path


@pytest.fixture
def router(config_path: Path) -> Iterator[Router]:
    made = Queue.from_config(config_path, wake=False)
    assert isinstance(made, Router)
    yield made
    made.close()


def _queue_of(url: str, job_id: int) -> str | None:
    store = open_store(url)
    try:
        row = store.get_job(job_id)
        return None if row is None else row.queue
    finally:
        store.close()


def test_one_database_is_just_a_queue(tmp_path: Path) -> None:
    path = tmp_path / "one.toml"
    path.write_text(f'[database]\nurl = "{sqlite_url_for(tmp_path / "one.db")}"\n')
    made = Queue.from_config(path)
    assert type(made) is Queue
    made.close()


def test_jobs_go_to_their_queues_database(router: Router, urls: tuple[str, str]) -> None:
    home, reports = urls
    plain = router.enqueue("email.send", {"to": "a"})  # queue "default": the home database
    explicit = router.enqueue("pdf.render", {"page": 1}, queue="pdf")
    registered = router.enqueue("routing.report", {"day": 3})  # the handler's queue
    assert isinstance(explicit, Enqueued) and isinstance(registered, Enqueued)
    assert (plain.database, plain.ref) == ("default", str(int(plain)))
    assert (explicit.database, registered.database) == ("reports", "reports")
    assert registered.ref == f"reports:{int(registered)}"
    assert _queue_of(home, plain) == "default"
    assert _queue_of(reports, explicit) == "pdf"
    assert _queue_of(reports, registered) == "reports"
    # The ids are per database: each is read back from its own.
    assert router.get(registered) is not None and router.get(registered).handler == "routing.report"  # type: ignore[union-attr]
    assert router.get(f"reports:{int(explicit)}").handler == "pdf.render"  # type: ignore[union-attr]
    assert router.get(JobRef("reports", int(explicit))).queue == "pdf"  # type: ignore[union-attr]
    assert router.get(int(plain)).handler == "email.send"  # type: ignore[union-attr]
    assert router.cancel(registered) is True
    assert router.result(registered).state == "cancelled"


def test_enqueue_many_splits_by_database(router: Router, urls: tuple[str, str]) -> None:
    home, reports = urls
    ids = router.enqueue_many(
        [
            {"handler": "a", "payload": 1},
            {"handler": "routing.report", "payload": 2},
            {"handler": "b", "payload": 3, "queue": "pdf"},
        ]
    )
    assert [i.database for i in ids] == ["default", "reports", "reports"]
    assert _queue_of(home, ids[0]) == "default"
    assert [_queue_of(reports, i) for i in ids[1:]] == ["reports", "pdf"]


def test_a_chain_in_one_database_runs_in_order(router: Router, urls: tuple[str, str]) -> None:
    _, reports = urls
    first, second = router.chain(
        [router.job("routing.report", {"n": 1}), router.job("pdf.render", {"n": 2}, queue="pdf")]
    )
    assert (first.database, second.database) == ("reports", "reports")
    store = open_store(reports)
    try:
        assert store.parents_of(second) == [int(first)]
        [claimed] = store.claim("reports", OWNER, 10, 30.0)  # the chain's head, in reports
        assert claimed.id == first
        assert store.complete(OWNER, [claimed.id], "keep") == 1
    finally:
        store.close()
    assert router.get(second).status == "ready"  # type: ignore[union-attr]
    then = router.group([router.job("pdf.render", queue="pdf")]).then(router.job("routing.report"))
    assert router.get(JobRef("reports", then)).status == "waiting"  # type: ignore[union-attr]


def test_nothing_spans_two_databases(router: Router) -> None:
    with pytest.raises(UsageError, match="default and reports: a chain or a group lives in one"):
        router.chain([router.job("email.send"), router.job("routing.report")])
    with pytest.raises(UsageError, match="lives in one"):
        router.group([router.job("email.send"), router.job("pdf.render", queue="pdf")])
    home_job = router.enqueue("email.send")
    with pytest.raises(UsageError, match="a job's parents must be in its database"):
        router.enqueue("routing.report", depends_on=[home_job])
    with pytest.raises(UsageError, match="a batch lives in one database"):
        router.batch(on_complete="email.send", on_dead="routing.report")
    with (
        pytest.raises(UsageError, match="a batch lives in one database"),
        router.batch(on_complete="routing.report") as batch,
    ):
        batch.enqueue("email.send")
    report = router.enqueue("routing.report")
    child = router.enqueue("pdf.render", queue="pdf", depends_on=[report])  # both in reports
    assert router.get(child).status == "waiting"  # type: ignore[union-attr]


def test_a_batch_lives_in_its_callbacks_database(router: Router, urls: tuple[str, str]) -> None:
    with router.batch(on_complete="routing.report") as batch:
        job_id = batch.enqueue("pdf.render", queue="pdf")
    assert isinstance(job_id, Enqueued) and job_id.database == "reports"
    assert batch.id is not None
    status = router.batch_status(f"reports:{batch.id}")
    assert status is not None and status.total == 1


def test_connection_must_be_to_the_queues_database(
    router: Router, urls: tuple[str, str], config_path: Path
) -> None:
    home, reports = urls
    config = load_config(config_path)
    if home.startswith("sqlite"):
        own, other = (sqlite3.connect(config.url_of(n).path) for n in ("reports", "default"))
    else:
        own, other = mysql_connect(reports), mysql_connect(home)
    try:
        with pytest.raises(UsageError, match=r"queue is in database reports .*: enqueue on a"):
            router.enqueue("routing.report", connection=other)
        job_id = router.enqueue("routing.report", {"x": 1}, connection=own)
        own.commit()
        assert job_id.database == "reports" and _queue_of(reports, job_id) == "reports"
    finally:
        own.close()
        other.close()
    with pytest.raises(UsageError, match="cannot tell which database"):
        router.enqueue("routing.report", connection=object())


def test_lock_lives_in_its_queues_database(router: Router) -> None:
    with router.lock("export", 30, queue="pdf") as lock:
        assert lock.held
        assert router.on("reports").store.list_locks()[0][0].name == "export"
        assert router.on("default").store.list_locks() == []


def test_a_batch_id_knows_its_database(router: Router) -> None:
    """batch_status(batch.id) asks the batch's own database, never the home batch that
    has the same number (ids are per database)."""
    with router.batch(on_complete="email.send") as home:
        home.enqueue("email.send")
        home.enqueue("email.send")
    with router.batch(on_complete="routing.report") as batch:
        batch.enqueue("pdf.render", queue="pdf")
    assert isinstance(batch.id, Enqueued) and batch.id.ref == f"reports:{int(batch.id)}"
    status = router.batch_status(batch.id)
    assert status is not None and status.total == 1, status
    assert router.batch_status(home.id).total == 2  # type: ignore[union-attr]


def test_the_job_holding_a_unique_key_knows_its_database(router: Router) -> None:
    """`existing` (the job a conflicting enqueue names) is asked of its own database, not
    of the home job with the same number."""
    router.enqueue("email.send")  # a home job numbered as the reports job will be
    first = router.enqueue("routing.report", {"n": 1}, unique_key="daily")
    again = router.enqueue("routing.report", {"n": 2}, unique_key="daily")
    assert again.conflicted and again.existing == first
    assert router.get(again.existing).handler == "routing.report"  # type: ignore[arg-type,union-attr]


def test_ids_read_back_through_the_router_know_their_database(router: Router) -> None:
    """A row's, a result's and a batch status's ids name jobs of their own database:
    `router.cancel(router.get(ref).id)` cancels that job, not the home one numbered so."""
    home = router.enqueue("email.send")
    report = router.enqueue("routing.report")
    assert int(home) == int(report)  # fresh databases: both number from the same start
    row = router.get(report.ref)
    assert row is not None and router.cancel(row.id) is True
    assert router.get(home).status == "ready"  # type: ignore[union-attr]
    assert router.get(router.result(report.ref).job_id).status == "cancelled"  # type: ignore[union-attr]
    with router.batch(on_complete="routing.report") as batch:
        batch.enqueue("routing.report")
    status = router.batch_status(batch.id)
    assert status is not None and router.batch_status(status.id) == status
    assert router.get(row.id).as_dict()["id"] == int(report)  # type: ignore[union-attr]


def test_jobs_of_two_databases_are_two_jobs(router: Router) -> None:
    """Ids are per database: the home job 1 and reports:1 are not equal, and stay two
    keys of a dict or a set (they collapsed into one); each still equals its int."""
    home = router.enqueue("email.send")
    report = router.enqueue("routing.report")
    assert int(home) == int(report)
    assert home != report and not home == report  # noqa: SIM201
    assert len({home, report}) == 2 and len({home: "a", report: "b"}) == 2
    assert home == int(home) and report == int(report) and int(report) == report
    row = router.get(report)
    assert row is not None and row.id == report and row.id != home


def test_a_database_that_fails_after_another_took_its_jobs_says_what_was_written(
    urls: tuple[str, str], tmp_path: Path
) -> None:
    """One transaction per database: a server down behind the second left the first
    one's jobs written and the caller without their ids (a retry enqueued them twice)."""
    home, _ = urls
    path = tmp_path / "down.toml"
    down = f"mysql://forkq:secret@127.0.0.1:{free_tcp_port()}/forkq_none"  # nothing listens
    path.write_text(
        f'[database]\nurl = "{home}"\n\n[databases.down]\nurl = "{down}"\nqueues = ["down"]\n'
    )
    router = Queue.from_config(path, wake=False)
    try:
        with pytest.raises(ForkqError) as caught:
            router.enqueue_many([{"handler": "a"}, {"handler": "b", "queue": "down"}])
        [written, unwritten] = caught.value.enqueued  # type: ignore[attr-defined]
        assert unwritten is None and written.database == "default"
        assert _queue_of(home, written) == "default"  # it was written: told, not lost
        assert "1 of these jobs were written before database down failed" in " ".join(
            caught.value.__notes__
        )
        with pytest.raises(ForkqError) as first:  # the down one first: nothing written
            router.enqueue_many([{"handler": "b", "queue": "down"}, {"handler": "a"}])
        assert not hasattr(first.value, "enqueued")
    finally:
        router.close()
