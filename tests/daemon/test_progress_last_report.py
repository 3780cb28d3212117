"""A handler's last progress report reaches its job's row, in the real daemon (both backends).

Progress is written at most once a second per job (SPEC: `job.progress`); a report
sooner than that after the last one written is held back, never lost: a command's runner
writes it once the second has passed while the program still runs (a Python handler's
next report or heartbeat does), and the end of the handler writes it before the job's
outcome. So a command printing `forkq-progress: 50` then `forkq-progress: 100` shows 100
while it runs and after it ends (done and kept, or failed and retried), as does a Python
handler's `job.progress(50)`, `job.progress(100)` (before: 50 for ever). A handler
reporting a hundred times a second still costs its row about one write a second, and a
program's lines past the log's cap (MAX_LOGGED_LINES) are still read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from command_util import POOL, QUEUE, commands_toml, script, status_is, wait_job
from daemon_util import Daemon, daemons_fixture, render_config  # noqa: F401  (the `daemons` fixture)

from supervisor import Queue
from supervisor.models import JobRow
from supervisor.store import Store
from supervisor.work.pipes import MAX_LOGGED_LINES

pytestmark = pytest.mark.timeout(120)

MODULE = """
import os
import time

from supervisor import handler

@handler("p.quick", queue="work", max_attempts=2, backoff_base=3600)
def quick(payload, job):
    assert job.progress(50, "half")
    assert not job.progress(100, "all")  # within the second: held back, not written now
    if payload.get("fail"):
        raise RuntimeError("failed after its last report")

@handler("p.beats", queue="work")
def beats(payload, job):
    job.progress(50, "half")
    job.progress(100, "all")  # held back ...
    time.sleep(1.1)
    job.heartbeat()  # ... and written with the next heartbeat
    while not os.path.exists(payload["flag"]):
        time.sleep(0.05)

@handler("p.chatty", queue="work")
def chatty(payload, job):
    for i in range(301):
        job.progress(i / 3, f"step {i}")
        time.sleep(0.01)
"""

TWO_REPORTS = "echo 'forkq-progress: 50 half' >&2\necho 'forkq-progress: 100 all' >&2\n"


def start(
    daemons: Callable[..., Daemon],
    tmp_path: Path,
    commands: dict[str, str],
    table: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> Daemon:
    """A daemon with the Python handlers of MODULE and these `[commands]` (name: script body;
    `table`: more keys of each), one worker; a job kept after success, a failed one
    retried an hour later."""
    daemon = daemons(pools={QUEUE: dict(POOL)}, **({"env": env} if env else {}))
    daemon.write_module("progressquick", MODULE)
    supervisor = {
        **daemon.supervisor,
        "handlers": [*daemon.supervisor["handlers"], "progressquick"],
    }
    tables = {
        name: {
            "argv": [script(tmp_path, name, body)],
            "queue": QUEUE,
            "max_attempts": 2,
            "backoff_base": 3600,
            **(table or {}),
        }
        for name, body in commands.items()
    }
    daemon.write_config(
        text=render_config(daemon.db_url, daemon.pools, supervisor) + commands_toml(tables)
    )
    return daemon.start().wait_ready()


def ended_as(row: JobRow) -> bool:
    """Its attempt has ended: done (kept), or waiting for another (ready, scheduled)."""
    return str(row.status) in ("done", "ready", "scheduled")


def report(row: JobRow) -> tuple[float, str] | None:
    if row.progress is None:
        return None
    found = json.loads(row.progress)
    return found["percent"], found["message"]


def test_a_commands_last_report_is_written_while_it_runs_and_stays_after(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    wait_for_flag = f"while [ ! -e '{flag}' ]; do sleep 0.05; done\n"
    daemon = start(daemons, tmp_path, {"c.reports": TWO_REPORTS + wait_for_flag})
    job = queue.enqueue("c.reports", {}, queue=QUEUE)
    try:
        # Held back at the second report, written about a second later: not at the exit.
        wait_job(store, job, lambda row: report(row) == (100.0, "all"), daemon, timeout=15)
        assert str(store.get_job(job).status) == "running"  # type: ignore[union-attr]
    finally:
        flag.touch()
    done = wait_job(store, job, status_is("done"), daemon)
    assert report(done) == (100.0, "all")


def test_a_python_handlers_held_back_report_goes_with_its_next_heartbeat(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    daemon = start(daemons, tmp_path, {})
    job = queue.enqueue("p.beats", {"flag": str(flag)}, queue=QUEUE)
    try:
        running = wait_job(store, job, lambda row: report(row) == (100.0, "all"), daemon)
        assert str(running.status) == "running", running
    finally:
        flag.touch()
    assert report(wait_job(store, job, status_is("done"), daemon)) == (100.0, "all")


def test_the_last_report_of_a_job_that_ends_at_once_is_on_its_row(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    daemon = start(
        daemons, tmp_path, {"c.ok": TWO_REPORTS + "exit 0\n", "c.fails": TWO_REPORTS + "exit 1\n"}
    )
    jobs = {
        "c.ok": queue.enqueue("c.ok", {}, queue=QUEUE),
        "c.fails": queue.enqueue("c.fails", {}, queue=QUEUE),
        "p.ok": queue.enqueue("p.quick", {}, queue=QUEUE),
        "p.fails": queue.enqueue("p.quick", {"fail": True}, queue=QUEUE),
    }
    waiting = ("ready", "scheduled")  # its second attempt, an hour later
    ended = {
        name: wait_job(store, job, lambda row: row.attempts == 1 and ended_as(row), daemon)
        for name, job in jobs.items()
    }
    for name, row in ended.items():
        assert (str(row.status) in waiting) == name.endswith("fails"), row
    assert {name: report(row) for name, row in ended.items()} == dict.fromkeys(jobs, (100.0, "all"))


def test_a_command_reporting_often_costs_its_row_about_a_write_a_second(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    body = (
        "i=0\nwhile [ $i -le 300 ]; do\n"
        '  echo "forkq-progress: $((i / 3)) step $i" >&2; i=$((i + 1)); sleep 0.01\n'
        f"done\nwhile [ ! -e '{flag}' ]; do sleep 0.05; done\n"
    )
    daemon = start(daemons, tmp_path, {"c.chatty": body})
    job = queue.enqueue("c.chatty", {}, queue=QUEUE)
    seen: list[str] = []  # each different progress the row showed, in order
    try:
        wait_job(store, job, lambda row: row.progress is not None, daemon)
        began = time.monotonic()
        while not seen or "step 300" not in seen[-1]:
            assert time.monotonic() - began < 20, f"no last report; seen {seen}"
            row = store.get_job(job)
            assert row is not None and str(row.status) == "running", row
            if row.progress is not None and (not seen or seen[-1] != row.progress):
                seen.append(row.progress)
            time.sleep(0.01)
        took = time.monotonic() - began
    finally:
        flag.touch()
    # About a write a second (a look every 10 ms would see a write per line: hundreds).
    assert len(seen) <= took + 3, (len(seen), took, seen)
    assert report(wait_job(store, job, status_is("done"), daemon)) == (100.0, "step 300")


def test_a_python_handler_reporting_often_costs_its_row_about_a_write_a_second(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    """job.progress a hundred times a second: about a write a second, and the last report
    on the row when the job is done (its handler returned right after it)."""
    daemon = start(daemons, tmp_path, {})
    job = queue.enqueue("p.chatty", {}, queue=QUEUE)
    wait_job(store, job, lambda row: row.progress is not None, daemon)
    seen: list[str] = []  # each different progress the row showed, in order
    began = time.monotonic()
    while (row := store.get_job(job)) is not None and str(row.status) != "done":
        assert time.monotonic() - began < 20, f"not done; seen {seen}"
        if row.progress is not None and (not seen or seen[-1] != row.progress):
            seen.append(row.progress)
        time.sleep(0.01)
    took = time.monotonic() - began
    assert row is not None and report(row) == (100.0, "step 300"), row
    assert len(seen) <= took + 3, (len(seen), took, seen)


def test_reports_and_the_result_past_the_logged_lines_cap_are_read(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    """A program's lines past MAX_LOGGED_LINES are not logged, yet still read: its last
    `forkq-progress:` (stderr) and `forkq-result:` (stdout) lines count (before: the ones
    of line 1,000 at the latest)."""
    flag, many = tmp_path / "go", MAX_LOGGED_LINES + 500
    body = (
        f"i=1\nwhile [ $i -le {many} ]; do\n"
        f'  echo "forkq-progress: $((i * 100 / {many})) item $i" >&2; echo "line $i"\n'
        "  i=$((i + 1))\ndone\n"
        f"while [ ! -e '{flag}' ]; do sleep 0.05; done\n"
        f"echo 'forkq-result: {{\"items\": {many}}}'\n"
    )
    daemon = start(daemons, tmp_path, {"c.many": body}, {"keep_result": True})
    job = queue.enqueue("c.many", {}, queue=QUEUE)
    try:
        last = (100.0, f"item {many}")
        running = wait_job(store, job, lambda row: report(row) == last, daemon, timeout=15)
        assert str(running.status) == "running", running
    finally:
        flag.touch()
    wait_job(store, job, status_is("done"), daemon)
    assert queue.result(job).value == {"items": many}


def test_a_secret_the_daemon_knows_is_masked_in_a_progress_message(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    """A command's `forkq-progress:` message quoting the SMTP password was stored and shown
    on the dashboard as it was, where its `command_output` log line was masked."""
    secret = "smtp-secret-0d1e"
    body = f"echo 'forkq-progress: 50 using {secret}' >&2\n"
    daemon = start(daemons, tmp_path, {"c.leaky": body}, env={"FORKQ_SMTP_PASSWORD": secret})
    job_id = queue.enqueue("c.leaky", {}, queue=QUEUE)
    row = wait_job(store, job_id, status_is("done"), daemon)
    assert report(row) == (50.0, "using ***"), row.progress
