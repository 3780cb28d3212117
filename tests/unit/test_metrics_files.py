"""The metrics pieces without a daemon, with real processes: workers forked from here
record into a multiprocess directory, the collector folds the files of the gone ones
without changing a total, and the server process answers /metrics (parsed with
prometheus-client's parser) and /healthz from the files and the shared pulse alone."""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families
from util import free_tcp_port, wait_until

from supervisor.models import QueueStats
from supervisor.observe import metrics
from supervisor.observe.collect import ForkqCollector, fold_gone
from supervisor.observe.health import Seen, db_limit, judge
from supervisor.observe.server import bind, spawn
from supervisor.observe.shared import Check, Pulse, read_check, write_check

Job = tuple[str, str, str, float]  # queue, handler, outcome, seconds
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = tmp_path / "metrics"
    path.mkdir(mode=0o700)
    monkeypatch.setenv(metrics.DIR_ENV, str(path))  # what the master does at boot
    return str(path)


def in_child(body: Callable[[], None]) -> int:
    """Fork, run `body` in the child, and end it with os._exit (never back into pytest)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            body()
            code = 0
        finally:
            os._exit(code)
    return pid


def record(jobs: list[Job]) -> Callable[[], None]:
    def body() -> None:
        from supervisor.observe.series import JobSeries

        series = JobSeries()
        for job in jobs:
            series.job(*job)

    return body


def run_worker(jobs: list[Job]) -> int:
    pid = in_child(record(jobs))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return pid


def samples_of(collector: ForkqCollector) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in collector.collect()
        for s in family.samples
    }


def finished(samples: Samples, outcome: str, queue: str = "work", handler: str = "h") -> float:
    labels = frozenset({"queue": queue, "handler": handler, "outcome": outcome}.items())
    return samples.get(("forkq_jobs_finished_total", labels), 0.0)


def bucket(samples: Samples, le: str) -> float:
    labels = frozenset({"queue": "work", "handler": "h", "le": le}.items())
    return samples[("forkq_job_duration_seconds_bucket", labels)]


def per_process_files(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if n.split("_")[-1][:-3].isdigit())


def test_folding_the_files_of_gone_workers_keeps_every_total(directory: str) -> None:
    run_worker([("work", "h", "done", 0.003)] * 3 + [("work", "h", "retry", 0.2)])
    run_worker([("work", "h", "done", 7.0)] * 2 + [("work", "h", "dead", 0.2)])
    assert len(per_process_files(directory)) == 4  # a counter and a histogram file each
    collector = ForkqCollector(directory, Pulse())

    first = samples_of(collector)
    assert per_process_files(directory) == []  # folded into one archive per type
    assert sorted(os.listdir(directory)) == ["counter_archive.db", "histogram_archive.db"]
    assert (finished(first, "done"), finished(first, "retry"), finished(first, "dead")) == (5, 1, 1)
    assert bucket(first, "0.005") == 3
    assert bucket(first, "0.25") == 5  # cumulative, as exposed
    assert bucket(first, "10.0") == 7
    assert bucket(first, "+Inf") == 7
    count = (
        "forkq_job_duration_seconds_count",
        frozenset({"queue": "work", "handler": "h"}.items()),
    )
    assert first[count] == 7
    assert samples_of(collector) == first  # reading again changes nothing

    run_worker([("work", "h", "done", 0.003)])  # a worker recycled later
    second = samples_of(collector)
    assert finished(second, "done") == 6
    assert bucket(second, "0.005") == 4
    assert per_process_files(directory) == []


def test_the_files_of_a_live_worker_are_read_and_left_alone(directory: str) -> None:
    hold_r, hold_w = os.pipe()

    def record_then_wait() -> None:
        record([("work", "h", "done", 0.01)] * 2)()
        os.close(hold_w)
        os.read(hold_r, 1)  # until the test lets it go

    pid = in_child(record_then_wait)
    os.close(hold_r)
    collector = ForkqCollector(directory, Pulse())
    try:
        wait_until(lambda: finished(samples_of(collector), "done") == 2, message="2 counted")
        assert fold_gone(directory) == 0
        assert len(per_process_files(directory)) == 2
    finally:
        os.close(hold_w)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert fold_gone(directory) == 2
    assert finished(samples_of(collector), "done") == 2


def pools(pool: str, most: int) -> Callable[[], None]:
    def body() -> None:
        from supervisor.observe.series import MasterSeries

        MasterSeries().pools({pool: most}, [(pool, True)])

    return body


def test_a_scrape_reads_on_when_an_exited_masters_gauges_go_under_it(
    directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor of several databases removes an exited master's gauge files while
    the server may be between listing the directory and reading them: the scrape reads
    again instead of failing (prometheus-client tolerates only live gauges going)."""
    masters = {}
    for pool, most in (("alpha", 2), ("beta", 3)):
        masters[pool] = in_child(pools(pool, most))
        _, status = os.waitpid(masters[pool], 0)
        assert os.waitstatus_to_exitcode(status) == 0
    gauges = [n for n in os.listdir(directory) if n.startswith("gauge_")]
    beta_gauges = {
        os.path.join(directory, n) for n in gauges if n.endswith(f"_{masters['beta']}.db")
    }
    assert beta_gauges
    monkeypatch.setattr(metrics, "_directory", directory)  # the supervisor's, as at its boot
    merge = MultiProcessCollector.merge

    def merge_as_they_go(files: list[str], accumulate: bool = True) -> Any:
        if beta_gauges - set(files):  # not the read (folding counters): go on
            return merge(files, accumulate)
        monkeypatch.setattr(MultiProcessCollector, "merge", merge)  # only this once
        metrics.master_exited(masters["beta"])  # after the listing, before the reading
        assert not any(os.path.exists(path) for path in beta_gauges)
        return merge(files, accumulate)

    monkeypatch.setattr(MultiProcessCollector, "merge", staticmethod(merge_as_they_go))
    samples = samples_of(ForkqCollector(directory, Pulse()))
    assert samples[("forkq_pool_max_workers", frozenset({"pool": "alpha"}.items()))] == 2
    assert not [name for name, labels in samples if ("pool", "beta") in labels]


def test_the_check_file_and_the_pulse_round_trip(directory: str) -> None:
    assert read_check(directory) is None
    check = Check(
        5.0, 1_700_000_000.0, 70.0, "gone", True, [{"queue": "q"}], [("max_age", "q", True)]
    )
    write_check(directory, check)
    assert read_check(directory) == check
    pulse = Pulse()
    assert pulse.read() is None
    pulse.beat(123.5, 20.0, True)
    beat = pulse.read()
    assert beat is not None and abs(beat.at - time.monotonic()) < 5
    assert abs(beat.wall - time.time()) < 5
    assert (beat.db_answered_at, beat.db_limit, beat.db_out) == (123.5, 20.0, True)


def test_healthz_judges_the_database_by_the_masters_breaker_and_its_last_answer() -> None:
    """503 once the master's breaker is open and the database has not answered it for
    `db_limit` (two check intervals, at least 5 s); a quiet gap between answers is not one."""
    assert db_limit(1.0) == 5.0 and db_limit(10.0) == 20.0
    base = Seen(loop_at=99.5, checked_at=99.0, db_error=None, check_stale_after=70.0)
    assert judge(replace(base, db_answered_at=80.0, db_limit=5.0), 100.0).ok  # breaker closed
    assert judge(replace(base, db_answered_at=96.0, db_limit=5.0, db_out=True), 100.0).ok
    silent = judge(replace(base, db_answered_at=94.0, db_limit=5.0, db_out=True), 100.0)
    assert silent.status == 503
    assert silent.reason == "the database has not answered the master for 6.0 s (limit 5 s)"


@pytest.mark.parametrize(
    ("facts", "reason"),
    [
        ((True, "max_jobs_per_child (1000)", False, False), "max_jobs"),
        ((True, "max_child_lifetime", False, False), "max_lifetime"),
        ((True, "memory_limit_mb (512)", False, False), "memory"),
        ((True, "pool shrinks", False, False), "retired"),
        ((True, "reload", False, False), "retired"),
        ((True, "master gone", False, False), "exited"),
        ((False, "", True, False), "timeout"),
        ((False, "shutdown", False, True), "killed"),
        ((False, "", False, False), "crashed"),
        ((False, "", False, False, True), "cancelled"),
    ],
)
def test_a_child_exit_has_one_reason_label(facts: tuple[Any, ...], reason: str) -> None:
    assert metrics.exit_reason(*facts) == reason
    assert reason in metrics.EXIT_REASONS


# --- the server process ------------------------------------------------------------------


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()


@pytest.fixture
def server(directory: str) -> Iterator[tuple[str, Pulse]]:
    pulse = Pulse()
    port = free_tcp_port()
    sock = bind(f"127.0.0.1:{port}")
    pid = spawn(sock, directory, pulse, [])
    sock.close()
    try:
        yield f"http://127.0.0.1:{port}", pulse
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def scrape(base: str) -> Samples:
    status, text = get(base + "/metrics")
    assert status == 200, text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def labelled(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


def test_the_server_answers_from_the_files_and_the_pulse(
    directory: str, server: tuple[str, Pulse]
) -> None:
    base, pulse = server
    run_worker([("work", "h", "done", 0.01)] * 4 + [("work", "h", "dead", 0.01)])
    status, text = get(base + "/healthz")
    assert status == 503 and "has not started" in text and "no database check" in text

    pulse.beat()
    stats = QueueStats("work", ready=3, delayed=2, running=1, dead=1, oldest_ready_age=12.5)
    check = Check(time.monotonic(), time.time(), 70.0, None, True, [stats.as_dict()])
    write_check(directory, Check(**{**vars(check), "alerts": [("max_ready", "work", True)]}))
    assert get(base + "/healthz")[0] == 200

    found = scrape(base)
    assert finished(found, "done") == 4 and finished(found, "dead") == 1
    assert found[labelled("forkq_queue_jobs", queue="work", status="ready")] == 3
    assert found[labelled("forkq_queue_jobs", queue="work", status="scheduled")] == 2
    assert found[labelled("forkq_queue_jobs", queue="work", status="running")] == 1
    assert found[labelled("forkq_queue_jobs", queue="work", status="dead")] == 1
    assert found[labelled("forkq_queue_oldest_ready_seconds", queue="work")] == 12.5
    assert found[labelled("forkq_alerts_firing", rule="max_ready", queue="work")] == 1
    assert found[labelled("forkq_chores_leader")] == 1
    assert abs(found[labelled("forkq_master_loop_timestamp_seconds")] - time.time()) < 5

    # Not the chores holder: no queue figures at all (not zeros), its own alerts only.
    write_check(directory, Check(time.monotonic(), time.time(), 70.0, "Lost connection", False))
    status, text = get(base + "/healthz")
    assert status == 503 and "did not answer at the last check: Lost connection" in text
    names = {name for name, _ in scrape(base)}
    assert "forkq_queue_jobs" not in names and "forkq_queue_oldest_ready_seconds" not in names
    assert scrape(base)[labelled("forkq_chores_leader")] == 0

    assert get(base + "/elsewhere")[0] == 404
