"""Poison jobs never stall a pool (issue 12, item 9).

A child that dies in the middle of a job (a segfault in a C extension, an OOM kill)
came up fine: what killed it is the job, and the job pays (its attempt counts, it
ends dead when attempts run out). Only a child that dies before it took any job is a
start-up failure, and only those push the pool into respawn back-off. The decision is
`pools.failed_at_startup`, tested here at fixed inputs and with the real daemon.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from daemon_util import Daemon, daemons_fixture, record_ids  # noqa: F401 - fixture
from util import count_rows, wait_until

from supervisor import Queue, events
from supervisor.daemon.decisions import STARTUP_WINDOW, failed_at_startup
from supervisor.daemon.ledger import Ledger, LockFile
from supervisor.daemon.scoreboard import Scoreboard
from supervisor.daemon.state import Child

pytestmark = pytest.mark.timeout(180)

POISON_SOURCE = '''\
"""A handler that segfaults its worker (as a broken C extension would)."""

import os
import resource
import signal

from supervisor import handler


@handler("t.segfault")
def segfault(payload, job):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file per crash
    os.kill(os.getpid(), signal.SIGSEGV)
'''
QUEUE = "work"
POISON, GOOD = 8, 5
DEADLINE = 30.0  # generous, and still half of BACKOFF_MAX: a climbed back-off misses it


# --- the decision at fixed inputs ------------------------------------------------------------


@pytest.mark.parametrize(
    ("lived", "exit_ok", "reported", "jobs", "expected"),
    [
        (0.1, False, False, 0, True),  # died before a word: a start-up failure
        (0.1, False, True, 0, True),  # said idle, then died before any job
        (STARTUP_WINDOW + 1, False, False, 0, True),  # never reported in
        (STARTUP_WINDOW + 1, False, True, 0, False),  # idle a while, then died
        (0.1, False, True, 1, False),  # died in its first job: the job's doing
        (0.1, False, False, 1, False),  # ... even before its "idle" was read
        (0.1, False, True, 4, False),  # finished jobs, died in the next
        (0.1, True, False, 0, False),  # a clean exit is never a failure
        (0.1, True, True, 1, False),
    ],
)
def test_failed_at_startup_at_fixed_inputs(
    lived: float, exit_ok: bool, reported: bool, jobs: int, expected: bool
) -> None:
    assert failed_at_startup(lived, exit_ok, reported, jobs) is expected


# --- the real daemon -----------------------------------------------------------------------------


def test_segfaulting_jobs_do_not_hold_good_jobs_back(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    daemon = daemons(
        pools={QUEUE: {"workers": 1, "timeout": 10}},
        supervisor={"handlers": ["testhandlers", "poison"]},
    )
    daemon.write_module("poison", POISON_SOURCE)
    record = tmp_path / "good.txt"
    queue = Queue(db_url)
    try:
        for n in range(POISON):
            queue.enqueue("t.segfault", {"n": n}, queue=QUEUE, max_attempts=2)
        good = [queue.enqueue("t.record", {"file": str(record)}, queue=QUEUE) for _ in range(GOOD)]
    finally:
        queue.close()
    daemon.start()
    wait_until(
        lambda: sorted(record_ids(record)) == sorted(good),
        timeout=DEADLINE,
        message=f"the {GOOD} good jobs done behind {POISON} poison jobs",
    )
    # Every poison job is paid for by itself: a crash counts its attempt, then dead.
    wait_until(
        lambda: count_rows(db_url, "forkq_jobs", "status = 'dead'") == POISON,
        timeout=DEADLINE,
        message="every poison job dead after its attempts",
    )
    assert daemon.events(events.POOL_CRASH_LOOP) == []
    assert daemon.events(events.CHILD_FAILED_AT_START) == []
    dead = count_rows(db_url, "forkq_jobs", "status = 'dead' AND last_error LIKE 'worker died%'")
    assert dead == POISON
    assert daemon.stop() == 0


def test_a_child_counts_the_job_it_died_in_as_taken() -> None:
    board, ledger = Scoreboard(), Ledger(LockFile())
    child = Child(
        pid=1, name="h:1:t", pool=QUEUE, slot=1, status_r=-1, wake_w=-1, started=0.0,
        board=board, ledger=ledger,
    )  # fmt: skip
    try:
        assert child.jobs == 0
        board.write(41, 10.0, 0)  # the first job starts (what the child writes)
        assert child.jobs == 1 and child.now_running == 41
        board.write(None, 0.0, 1)  # it finished
        board.write(42, 10.0, 1)  # the second starts: the child dies in it
        assert child.jobs == 2
    finally:
        board.close()
        ledger.close()
