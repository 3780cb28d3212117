"""The soft timeout's timer (work/guards.py): one armed timer serves a run of quick jobs
(a system call for many, not two a job), yet every job still gets its whole timeout and
no alarm lands in a handler that is not past it; a job's end leaves the timer to the
next job, and a worker going idle stops it. Real SIGALRMs, a real worker on SQLite."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from supervisor import Queue, registry
from supervisor.config import Config, PoolConfig
from supervisor.dburl import parse_database_url
from supervisor.errors import JobTimeout
from supervisor.store import open_store
from supervisor.work import guards
from supervisor.work.worker import Worker


@pytest.fixture
def setitimer_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    calls: list[float] = []
    real = signal.setitimer

    def counted(which: int, seconds: float, interval: float = 0.0) -> Any:
        calls.append(seconds)
        return real(which, seconds, interval)

    monkeypatch.setattr(signal, "setitimer", counted)
    yield calls
    guards.disarm_soft_timeout()


def _runs_until_timeout(seconds: float) -> float:
    """Arm as a job does, spin like a handler until JobTimeout: the seconds it ran."""
    started = time.monotonic()
    guards.arm_soft_timeout(seconds)
    try:
        while time.monotonic() - started < seconds + 5:
            time.sleep(0.001)
    except JobTimeout:
        return time.monotonic() - started
    finally:
        guards.end_soft_timeout()
    raise AssertionError("no soft timeout")


def test_a_run_of_quick_jobs_arms_the_timer_once(setitimer_calls: list[float]) -> None:
    for _ in range(1000):  # (each reads the timer: one getitimer, not a set and a stop)
        guards.arm_soft_timeout(60.0)  # within the slack (0.25 s) of the first arm
        guards.end_soft_timeout()
    assert len(setitimer_calls) == 1


def test_a_job_started_behind_another_still_gets_its_whole_timeout(
    setitimer_calls: list[float],
) -> None:
    guards.arm_soft_timeout(1.0)  # a quick job: ends, its timer left running
    guards.end_soft_timeout()
    time.sleep(0.002)  # within the slack of 1 s (10 ms): the next job may reuse that timer
    ran = _runs_until_timeout(1.0)
    assert 1.0 <= ran < 2.0  # never early; late by the slack (10 ms) and scheduling


def test_an_alarm_after_its_job_ended_is_ignored(setitimer_calls: list[float]) -> None:
    guards.arm_soft_timeout(0.05)
    guards.end_soft_timeout()
    time.sleep(0.2)  # the timer fires here, outside any handler: nothing is raised
    assert 0.3 <= _runs_until_timeout(0.3) < 1.3  # and the next job arms its own


def test_a_signal_taken_by_someone_else_is_taken_back_with_a_fresh_timer(
    setitimer_calls: list[float],
) -> None:
    guards.arm_soft_timeout(60.0)
    guards.end_soft_timeout()
    signal.signal(signal.SIGALRM, signal.SIG_IGN)  # as pytest-timeout or a library might
    assert 0.2 <= _runs_until_timeout(0.2) < 1.2
    assert len(setitimer_calls) == 2


def test_a_timer_a_handler_stopped_behind_our_back_is_set_again(
    setitimer_calls: list[float],
) -> None:
    guards.arm_soft_timeout(30.0)
    guards.end_soft_timeout()
    # A handler's own SIGALRM timeout (as timeout_decorator does): its timer, then ours
    # stopped and our handler put back, so nothing but the timer itself says so.
    guards.arm_soft_timeout(30.0)
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: None)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)
    guards.end_soft_timeout()
    assert 0.3 <= _runs_until_timeout(0.3) < 1.3  # the next job within the slack: on time


def test_a_handler_left_in_place_by_a_job_never_hears_our_timer(
    setitimer_calls: list[float],
) -> None:
    heard: list[int] = []
    guards.arm_soft_timeout(0.05)
    signal.signal(signal.SIGALRM, lambda signum, frame: heard.append(signum))  # left in place
    guards.end_soft_timeout()  # the worker goes on: our timer is stopped
    time.sleep(0.15)
    assert heard == [] and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_worker_going_idle_stops_the_timer(sqlite_db_url: str) -> None:
    registry.handler("t.timer_noop", queue="timer")(lambda payload, job: None)
    store = open_store(sqlite_db_url)
    Queue(store=store, wake=False).enqueue("t.timer_noop", queue="timer")
    config = Config(database=parse_database_url(sqlite_db_url), pools=(PoolConfig("timer"),))
    worker = Worker(store, config, ["timer"], "test:1:timer")
    try:
        assert worker.work_once() == 1
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0  # left running after the job
        assert worker.work_once() == 0  # nothing left: idle
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        worker.shutdown()
        store.close()
        guards.disarm_soft_timeout()
