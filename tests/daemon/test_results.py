"""Kept results and every attempt (issue 25 items 2 and 3), in the real daemon, both backends.

A handler that keeps its result returns a value that `Queue.wait` (in another thread,
woken by the worker through the same-host wait socket) and `Queue.result` read, and
`forkq show` prints; a command returns one on its last stdout line; a job failing twice
then succeeding lists three attempts with host, pid and error; a worker SIGKILLed in the
middle of a job leaves that attempt recorded as `died`; kept results are pruned after
`result_retention`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from command_util import commands_toml
from daemon_util import HANDLERS_MODULE, Daemon, daemons_fixture, render_config  # noqa: F401
from util import sql, wait_until

from supervisor import Queue, events
from supervisor.results import JobResult, attempt_history
from supervisor.store import Store, open_store
from supervisor.wake.places import store_identity
from supervisor.wake.waiters import Waiter

pytestmark = pytest.mark.timeout(120)

RESULT_HANDLERS = """\
import os
import time

from supervisor import handler


def _gate(path):
    deadline = time.monotonic() + 30
    while path and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)


@handler("r.total", queue="work", keep_result=True)
def total(payload, job):
    _gate(payload.get("gate"))
    return {"sum": sum(payload["numbers"]), "job": job.id}


@handler("r.sized", queue="work", keep_result=True)
def sized(payload, job):
    return "x" * payload["bytes"]


@handler("r.echo", queue="work", keep_result=True)
def echo(payload, job):
    return payload["value"]


@handler("r.surrogate", queue="work", keep_result=True)
def surrogate(payload, job):
    return "a" + chr(0xDCFF) + "b"


class Unlistable(dict):
    def items(self):
        raise LookupError("no items today")


@handler("r.unlistable", queue="work", keep_result=True)
def unlistable(payload, job):
    return Unlistable(a=1)


@handler("r.gated", queue="work")
def gated(payload, job):
    _gate(payload["gate"])


@handler("r.plain", queue="work")
def plain(payload, job):
    return {"not": "kept"}


@handler("r.flaky", queue="work", max_attempts=5, backoff_base=0, backoff_cap=0)
def flaky(payload, job):
    if job.attempts < 3:
        raise RuntimeError(f"flaky attempt {job.attempts}")
    return "ok"


@handler("r.victim", queue="work", max_attempts=3, backoff_base=0, backoff_cap=0)
def victim(payload, job):
    if job.attempts == 1:
        with open(payload["file"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
"""

POOL = {"workers": 1, "max_workers": 1, "timeout": 30, "on_success": "keep"}


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    made = open_store(db_url)
    yield made
    made.close()


def result_daemon(
    daemons: Callable[..., Daemon], pool: dict[str, Any] | None = None, commands: str = ""
) -> Daemon:
    daemon = daemons(
        pools={"work": {**POOL, **(pool or {})}},
        supervisor={"handlers": [HANDLERS_MODULE, "resulthandlers"]},
    )
    daemon.write_module("resulthandlers", RESULT_HANDLERS)
    text = render_config(daemon.db_url, daemon.pools, daemon.supervisor) + commands
    daemon.write_config(text=text)
    return daemon.start().wait_ready()


def forkq_show(daemon: Daemon, job_id: int, *more: str) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "supervisor",
            "show",
            str(job_id),
            "-c",
            str(daemon.config_path),
            *more,
        ],
        env=daemon.environment(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_a_kept_result_is_waited_for_woken_read_and_shown(
    daemons: Callable[..., Daemon], db_url: str, store: Store, tmp_path: Path
) -> None:
    daemon = result_daemon(daemons)
    queue = Queue(db_url)
    gate = tmp_path / "gate"
    job_id = queue.enqueue("r.total", {"numbers": [1, 2, 3], "gate": str(gate)}, queue="work")
    waited: list[JobResult] = []
    waiting = threading.Thread(target=lambda: waited.append(Queue(db_url).wait(job_id, 60)))
    waiting.start()
    with Waiter(store_identity(store), job_id) as waiter:
        assert waiter.listening
        wait_until(lambda: queue.result(job_id).state == "running", 30, message="running")
        running = queue.result(job_id)
        assert not running.finished and not running.kept
        with pytest.raises(TimeoutError):
            queue.wait(job_id, timeout=0.05)
        gate.touch()
        assert waiter.nap(60)  # the worker that ended it woke this socket: no poll
    waiting.join(60)
    expected = {"sum": 6, "job": job_id}
    assert waited == [JobResult(job_id, "done", True, expected)]
    assert queue.result(job_id) == JobResult(job_id, "done", True, expected)
    shown = forkq_show(daemon, job_id)
    assert any(
        line.startswith("result") and json.dumps(expected) in line for line in shown.splitlines()
    )
    assert json.loads(forkq_show(daemon, job_id, "--json"))["result"]["value"] == expected

    plain = queue.enqueue("r.plain", {}, queue="work")
    assert queue.wait(plain, 30) == JobResult(plain, "done", False, None)  # not kept
    queue.close()


def test_show_of_a_job_deleted_on_success_lines_up_its_kept_result(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    daemon = result_daemon(daemons, pool={"on_success": "delete"})
    queue = Queue(db_url)
    job_id = queue.enqueue("r.total", {"numbers": [4, 5]}, queue="work")
    assert queue.wait(job_id, 60).value == {"sum": 9, "job": job_id}
    assert queue.get(job_id) is None  # its row went with its success
    lines = forkq_show(daemon, job_id).splitlines()
    assert [line.split()[0] for line in lines] == ["id", "status", "result", "last_error"]
    starts = {line.index(line.split()[1], len(line.split()[0])) for line in lines}
    assert starts == {len("last_error") + 2}, lines  # one column after the longest key
    assert lines[-1].split() == ["last_error", "-"]
    queue.close()


def test_a_kept_value_no_database_takes_ends_dead_and_no_child_crashes(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    """A lone surrogate passes the JSON encoder, and no driver writes it: the worker died
    writing it, the job went back uncounted, and every next worker died on it (about 25
    child_crashed a second) until an operator cancelled it. Here it comes once from a
    handler and once from a row another program inserted (its payload's JSON escape)."""
    daemon = result_daemon(daemons)
    queue = Queue(db_url)
    returned = queue.enqueue("r.surrogate", {}, queue="work")
    insert = "INSERT INTO forkq_jobs (queue, handler, payload) VALUES ('work', 'r.echo', ?)"
    sql(db_url, insert, [r'{"value": ["x\udcffy"]}'])  # valid JSON: Python reads a surrogate
    [raw] = [row.id for row in queue.store.list_jobs() if row.id != returned]
    raising = queue.enqueue("r.unlistable", {}, queue="work")  # the encoder meets a LookupError
    after = queue.enqueue("r.total", {"numbers": [2, 3]}, queue="work")
    assert queue.wait(after, 60).value == {"sum": 5, "job": after}  # the pool goes on
    for job_id, error in [
        (returned, "UnicodeEncodeError"),
        (raw, "UnicodeEncodeError"),
        (raising, "LookupError: no items today"),
    ]:
        row = queue.get(job_id)
        assert row is not None and (row.status, row.attempts) == ("dead", 1), row
        assert f"its return value is kept but is not JSON: {error}" in (row.last_error or "")
    assert not daemon.events(events.CHILD_CRASHED), daemon.describe()
    queue.close()


def test_a_kept_value_longer_than_the_server_takes_ends_dead_and_the_pool_goes_on(
    daemons: Callable[..., Daemon], db_url: str, store: Store
) -> None:
    """The server (max_allowed_packet 16 MB here) refuses a longer statement as if it
    had gone away: the worker retried writing the value for ever, each next worker too
    once the lease ran out, until no worker of the pool was left to run anything."""
    if store.backend != "mysql":
        pytest.skip("MySQL's max_allowed_packet; SQLite takes a value up to a gigabyte")
    result_daemon(daemons)
    queue = Queue(db_url)
    huge = queue.enqueue("r.sized", {"bytes": 17 * 1024 * 1024}, queue="work")
    after = queue.enqueue("r.total", {"numbers": [2, 3]}, queue="work")
    assert queue.wait(after, 60).value == {"sum": 5, "job": after}  # the pool goes on
    row = queue.get(huge)
    assert row is not None and row.status == "dead", row
    assert "its return value is 17.0 MB to send" in (row.last_error or "")
    assert "max_allowed_packet (16.0 MB)" in (row.last_error or "")
    assert queue.result(huge).state == "dead" and not queue.result(huge).kept
    queue.close()


def test_a_command_returns_its_result_on_its_last_stdout_line(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    said = "echo working; echo 'forkq-result: {\"rows\": 3}'"
    commands = commands_toml(
        {
            "c.count": {"argv": ["sh", "-c", said], "queue": "work", "keep_result": True},
            "c.bad": {"argv": ["sh", "-c", "echo 'forkq-result: nope'"], "queue": "work",
                      "keep_result": True},
            "c.later": {"argv": ["sh", "-c", "echo 'forkq-result: 1'; echo done"],
                        "queue": "work", "keep_result": True},
        }
    )  # fmt: skip
    result_daemon(daemons, commands=commands)
    queue = Queue(db_url)
    counted = queue.enqueue("c.count", {}, queue="work")
    bad = queue.enqueue("c.bad", {}, queue="work")
    later = queue.enqueue("c.later", {}, queue="work")
    assert queue.wait(counted, 30) == JobResult(counted, "done", True, {"rows": 3})
    assert queue.wait(bad, 30).state == "dead"
    row = queue.get(bad)
    assert row is not None and "forkq-result: line is not JSON" in (row.last_error or "")
    assert queue.wait(later, 30) == JobResult(later, "done", True, None)  # not the last line
    queue.close()


def test_a_job_failing_twice_then_succeeding_lists_three_attempts(
    daemons: Callable[..., Daemon], db_url: str, store: Store
) -> None:
    daemon = result_daemon(daemons)
    queue = Queue(db_url)
    job_id = queue.enqueue("r.flaky", {}, queue="work")
    assert queue.wait(job_id, 60).state == "done"
    row = store.get_job(job_id)
    assert row is not None
    history = attempt_history(store, row)
    assert [(a.attempt, a.outcome) for a in history] == [(1, "retry"), (2, "retry"), (3, "done")]
    for number, attempt in enumerate(history[:2], start=1):
        assert attempt.host == socket.gethostname()
        assert attempt.pid is not None and attempt.pid > 1
        assert f"RuntimeError: flaky attempt {number}" in (attempt.error or "")
        assert attempt.started_at is not None and attempt.ended_at is not None
        assert attempt.started_at <= attempt.ended_at
    shown = forkq_show(daemon, job_id)
    assert "attempt history:" in shown
    assert "flaky attempt 1" in shown and "flaky attempt 2" in shown
    assert len(json.loads(forkq_show(daemon, job_id, "--json"))["attempt_history"]) == 3
    queue.close()


def test_a_worker_killed_mid_job_leaves_that_attempt_recorded_as_died(
    daemons: Callable[..., Daemon], db_url: str, store: Store, tmp_path: Path
) -> None:
    result_daemon(daemons)
    queue = Queue(db_url)
    noted = tmp_path / "victim.pid"
    job_id = queue.enqueue("r.victim", {"file": str(noted)}, queue="work")
    pid = wait_until(lambda: noted.exists() and noted.read_text() and int(noted.read_text()), 30)
    os.kill(pid, signal.SIGKILL)
    assert queue.wait(job_id, 60).state == "done"  # its second attempt returns at once
    recorded = store.job_attempts(job_id)
    assert [(r["attempt"], r["outcome"], r["pid"]) for r in recorded] == [(1, "died", pid)]
    assert recorded[0]["host"] == socket.gethostname()
    assert "signal 9" in recorded[0]["error"] or "SIGKILL" in recorded[0]["error"]
    queue.close()


def test_kept_results_are_pruned_after_result_retention(
    daemons: Callable[..., Daemon], db_url: str, store: Store
) -> None:
    result_daemon(daemons, pool={"keep_result": True, "result_retention": "1s"})
    queue = Queue(db_url)
    job_id = queue.enqueue("r.plain", {}, queue="work")  # the pool keeps what its handlers return
    assert queue.wait(job_id, 30) == JobResult(job_id, "done", True, {"not": "kept"})
    wait_until(lambda: store.job_result(job_id) is None, 30, message="result pruned")
    assert queue.result(job_id) == JobResult(job_id, "done", False, None)  # the job row stays
    queue.close()


def test_a_kept_value_is_not_kept_waiting_by_a_slower_job_claimed_behind_it(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    """The one child claims both; the second (another handler) blocks until the test
    opens its gate. The first's value is written before the second starts, not with the
    claim after it: a `Queue.wait` on it is not held up by an unrelated job."""
    daemon = result_daemon(daemons)
    gate = tmp_path / "gate"
    producer = Queue(db_url)
    try:
        kept, blocked = producer.enqueue_many(
            [
                {"handler": "r.total", "payload": {"numbers": [1, 2]}, "queue": "work"},
                {"handler": "r.gated", "payload": {"gate": str(gate)}, "queue": "work"},
            ]
        )
        wait_until(lambda: daemon.running(blocked), timeout=10, message="the second running")
        done = wait_until(
            lambda: (r := producer.result(kept)).finished and r,
            timeout=10,
            message="the first's value written while the second runs",
        )
        assert done.value == {"sum": 3, "job": kept} and daemon.running(blocked)
        gate.touch()
        wait_until(lambda: producer.result(blocked).finished, timeout=10, message="the second")
    finally:
        gate.touch()
        producer.close()
    assert daemon.stop() == 0, daemon.describe()
