"""`forkq work`: one foreground worker as a real process, on both backends.

Each test writes a handler module into tmp_path and a config naming it, starts
`python -m supervisor work` in a new session, and waits on what the database says,
with deadlines. Every process started here is killed (its whole group) in teardown.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from util import dies_with_us, sql, subprocess_env, wait_until

from supervisor import Queue
from supervisor.models import JobRow, JobState
from supervisor.store import Store

HANDLERS = '''
import time
from pathlib import Path

from supervisor import Fail, Retry, handler


def mark(payload, job, what):
    Path(payload["dir"], f"{what}-{job.id}-{job.attempts}").write_text("")


@handler("t.record")
def record(payload, job):
    mark(payload, job, "ran")


@handler("t.fail")
def fail(payload, job):
    raise Fail("customer 42 does not exist")


@handler("t.retry", max_attempts=2)
def retry(payload, job):
    mark(payload, job, "ran")
    raise Retry(delay=0, reason="not yet")


class TemporaryError(Exception):
    pass


@handler("t.retry_from", max_attempts=1)
def retry_from(payload, job):
    """The README's first handler: Retry raised from the error that made it retry."""
    try:
        raise TemporaryError("upstream said 503")
    except TemporaryError as exc:
        raise Retry(delay=0) from exc


@handler("t.retry_bare", max_attempts=1)
def retry_bare(payload, job):
    raise Retry(delay=0)


@handler("t.stubborn")
def stubborn(payload, job):
    """Swallows every exception, the cancel's JobCancelled too, for 3 s."""
    mark(payload, job, "started")
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
    mark(payload, job, "ran")


@handler("t.block")
def block(payload, job):
    """Runs until the test creates `release` (or 60 s pass)."""
    mark(payload, job, "started")
    deadline = time.monotonic() + 60
    while not Path(payload["dir"], "release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    mark(payload, job, "ran")
'''

CONFIG = """
[supervisor]
handlers = ["workhandlers"]
{supervisor}

[pools.default]
on_success = "keep"

[pools.a]
on_success = "keep"

[pools.b]
on_success = "keep"
"""

WAIT = 30.0  # seconds any single condition may take on a slow machine


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "workhandlers.py").write_text(HANDLERS)
    write_config(tmp_path)
    return tmp_path


def write_config(workdir: Path, pool_timeout: float | None = None, **supervisor: float) -> None:
    lines = "\n".join(f"{key} = {value}" for key, value in supervisor.items())
    text = CONFIG.format(supervisor=lines)
    if pool_timeout is not None:
        text = text.replace("[pools.default]\n", f"[pools.default]\ntimeout = {pool_timeout}\n")
    (workdir / "forkq.toml").write_text(text)


Start = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def start(workdir: Path, db_url: str) -> Iterator[Start]:
    """Start `forkq work ARGS` in its own session; every group is killed at teardown."""
    started: list[subprocess.Popen[str]] = []

    def launch(*args: str) -> subprocess.Popen[str]:
        env = subprocess_env(db_url, FORKQ_LOG_FORMAT="json")
        env["PYTHONPATH"] = f"{workdir}:{env['PYTHONPATH']}"
        env.pop("FORKQ_CONFIG", None)
        command = [sys.executable, "-m", "supervisor", "work", "-c", "forkq.toml"]
        process = subprocess.Popen(
            [*command, *args, "--database", db_url],
            cwd=workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            preexec_fn=dies_with_us(signal.SIGTERM),  # stops after its job (60 s at most)
        )
        started.append(process)
        return process

    yield launch
    for process in started:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=WAIT)


def finish(process: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    """Wait for the worker to exit by itself; its exit code and its log lines."""
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def run(start: Start, *args: str) -> str:
    """`forkq work ARGS` to completion; it must exit 0."""
    code, output = finish(start(*args))
    assert code == 0, output
    return output


def jobs(store: Store, ids: list[int]) -> list[JobRow]:
    rows = [store.get_job(i) for i in ids]
    assert all(row is not None for row in rows)
    return [row for row in rows if row is not None]


def statuses(store: Store, ids: list[int]) -> list[str]:
    return [str(row.status) for row in jobs(store, ids)]


def test_burst_drains_every_ready_job_and_exits_0(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    ids = [queue.enqueue("t.record", {"dir": str(workdir), "i": i}) for i in range(25)]
    later = queue.enqueue("t.record", {"dir": str(workdir)}, delay=3600)
    run(start, "--burst")
    assert statuses(store, ids) == ["done"] * 25
    assert all((workdir / f"ran-{i}-1").exists() for i in ids)
    assert statuses(store, [later]) == ["scheduled"]  # not due: burst does not wait for it


def test_max_jobs_stops_after_that_many_jobs(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    ids = [queue.enqueue("t.record", {"dir": str(workdir)}) for _ in range(5)]
    run(start, "--max-jobs", "3")
    assert statuses(store, ids) == ["done"] * 3 + ["ready"] * 2
    assert [row.attempts for row in jobs(store, ids)[3:]] == [0, 0]  # handed back uncounted


def test_queues_limits_what_is_worked(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    a = [queue.enqueue("t.record", {"dir": str(workdir)}, queue="a") for _ in range(3)]
    b = [queue.enqueue("t.record", {"dir": str(workdir)}, queue="b") for _ in range(3)]
    default = queue.enqueue("t.record", {"dir": str(workdir)})
    run(start, "--queues", "a", "--burst")
    assert statuses(store, a) == ["done"] * 3
    assert statuses(store, [*b, default]) == ["ready"] * 4
    run(start, "--queues", "b,default", "--burst")
    assert statuses(store, [*b, default]) == ["done"] * 4


def insert_raw_job(db_url: str, handler: str, payload: str) -> int:
    """A row as another program would write it, bypassing forkq's checks."""
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload) VALUES (?, ?, ?)",
        ("default", handler, payload),
    )
    return int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])


def test_bad_jobs_end_dead_with_a_clear_error_while_the_rest_complete(
    start: Start, workdir: Path, queue: Queue, store: Store, db_url: str
) -> None:
    payload = {"dir": str(workdir)}
    good = [queue.enqueue("t.record", payload)]
    unknown = queue.enqueue("nobody.registered.this", payload)
    good.append(queue.enqueue("t.record", payload))
    not_json = insert_raw_job(db_url, "t.record", "{this is not json")
    failing = queue.enqueue("t.fail", payload)
    good.append(queue.enqueue("t.record", payload))
    run(start, "--burst")
    assert statuses(store, good) == ["done"] * 3
    errors = {}
    for row in jobs(store, [unknown, not_json, failing]):
        assert row.status == JobState.DEAD, row
        assert row.attempts == 1
        errors[row.id] = row.last_error or ""
    assert "unknown handler 'nobody.registered.this'" in errors[unknown]
    assert "payload is not valid JSON" in errors[not_json]
    assert "failed permanently: customer 42 does not exist" in errors[failing]


def test_retry_with_no_delay_ends_dead_after_exactly_max_attempts(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    job_id = queue.enqueue("t.retry", {"dir": str(workdir)}, max_attempts=2)
    run(start, "--burst")
    (row,) = jobs(store, [job_id])
    assert (row.status, row.attempts) == (JobState.DEAD, 2)
    assert row.last_error is not None and "retry requested: not yet" in row.last_error
    assert sorted(p.name for p in workdir.glob("ran-*")) == [f"ran-{job_id}-1", f"ran-{job_id}-2"]


def test_a_retry_says_the_error_it_was_raised_from_and_never_repeats_itself(
    start: Start, queue: Queue, store: Store
) -> None:
    """`raise Retry(delay=60) from exc` (the README's example) kept only "retry requested:
    retry requested": the reason to retry, the error, was lost."""
    caused = queue.enqueue("t.retry_from", {})
    bare = queue.enqueue("t.retry_bare", {})
    run(start, "--burst")
    errors = {row.id: row.last_error for row in jobs(store, [caused, bare])}
    assert errors == {
        caused: "retry requested: TemporaryError: upstream said 503 (attempt 1 of 1)",
        bare: "retry requested (attempt 1 of 1)",
    }


def test_a_paused_queue_is_not_worked_until_resumed(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    ids = [queue.enqueue("t.record", {"dir": str(workdir)}) for _ in range(3)]
    store.set_paused("default", True)
    run(start, "--burst")  # nothing claimable: it leaves at once
    assert [(row.status, row.attempts) for row in jobs(store, ids)] == [("ready", 0)] * 3
    worker = start()
    wait_until(lambda: store.list_processes(), WAIT, message="the worker to register")
    assert statuses(store, ids) == ["ready"] * 3
    store.set_paused("default", False)
    wait_until(lambda: statuses(store, ids) == ["done"] * 3, WAIT, message="jobs done")
    worker.send_signal(signal.SIGTERM)
    assert finish(worker)[0] == 0


def running_job(store: Store, job_id: int) -> bool:
    row = store.get_job(job_id)
    return row is not None and row.status == JobState.RUNNING


def test_sigterm_lets_the_running_job_finish(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    payload = {"dir": str(workdir)}
    blocking = queue.enqueue("t.block", payload)
    waiting = queue.enqueue("t.record", payload)
    worker = start()
    wait_until(lambda: (workdir / f"started-{blocking}-1").exists(), WAIT, message="job start")
    assert running_job(store, blocking)
    worker.send_signal(signal.SIGTERM)
    (workdir / "release").write_text("")
    code, output = finish(worker)
    assert code == 0, output
    (done, left) = jobs(store, [blocking, waiting])
    assert (done.status, done.attempts) == (JobState.DONE, 1)
    assert (left.status, left.attempts) == (JobState.READY, 0)  # never started, handed back
    assert not (workdir / f"ran-{waiting}-1").exists()


# Notes its pid and its background sleep's, then waits on the sleep (a TERM trap that
# says so): a program that would outlive a plain kill of its own pid.
TRAPPER = """\
#!/bin/sh
trap 'echo got TERM >&2; exit 1' TERM
sleep 300 &
echo "$$ $!" > "$PIDS"
wait
"""


def test_a_cancelled_running_job_is_stopped_and_ends_cancelled(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    """No master runs beside `forkq work`: the worker itself sees a cancel of the job it
    runs within about a second, interrupts a Python handler (as its soft timeout does)
    or kills a command's program and what it left, ends the job cancelled (never retried,
    no `job_finished` as a retry) and goes on with the next job."""
    script = workdir / "trapper.sh"
    script.write_text(TRAPPER)
    script.chmod(0o755)
    pids = workdir / "pids"
    table = f'\n[commands."t.trapper"]\nargv = ["{script}"]\nenv = {{ PIDS = "{pids}" }}\n'
    config = workdir / "forkq.toml"
    config.write_text(config.read_text() + table)
    payload = {"dir": str(workdir)}
    blocking = queue.enqueue("t.block", payload)
    program = queue.enqueue("t.trapper", {})
    after = queue.enqueue("t.record", payload)
    worker = start()
    wait_until(lambda: (workdir / f"started-{blocking}-1").exists(), WAIT, message="job start")
    asked = time.monotonic()
    assert queue.cancel(blocking)
    wait_until(lambda: statuses(store, [blocking]) == ["cancelled"], WAIT, message="cancelled")
    took = time.monotonic() - asked
    wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2, WAIT, message="pids")
    spawned = [int(pid) for pid in pids.read_text().split()]
    assert queue.cancel(program)
    wait_until(lambda: statuses(store, [program]) == ["cancelled"], WAIT, message="cancelled")
    wait_until(lambda: statuses(store, [after]) == ["done"], WAIT, message="the next job done")
    wait_until(lambda: not any(map(alive, spawned)), WAIT, message=f"{spawned} killed")
    worker.send_signal(signal.SIGTERM)
    code, output = finish(worker)
    assert code == 0, output
    assert not (workdir / f"ran-{blocking}-1").exists()  # interrupted, not run to its end
    for job_id in (blocking, program):
        row = store.get_job(job_id)
        assert row is not None and row.attempts == 1 and "cancelled by" in (row.last_error or "")
        said = _lines_of(output, job_id)
        assert '"event": "job_cancelled"' in said and '"event": "job_finished"' not in said, said
    print(f"\n[figures] forkq work: running job cancelled after {took:.2f} s")


def test_a_cancelled_job_whose_handler_swallows_the_cancel_still_ends_cancelled(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    """A handler that catches BaseException runs on to its end (no master kills it under
    `forkq work`), but its job ends cancelled, never done: its dependents are cancelled
    with it, as the cancel said."""
    payload = {"dir": str(workdir)}
    stubborn = queue.enqueue("t.stubborn", payload)
    child = queue.enqueue("t.record", payload, depends_on=[stubborn])
    worker = start()
    wait_until(lambda: (workdir / f"started-{stubborn}-1").exists(), WAIT, message="job start")
    assert queue.cancel(stubborn)
    wait_until(lambda: (workdir / f"ran-{stubborn}-1").exists(), WAIT, message="its end")
    wait_until(lambda: statuses(store, [stubborn]) == ["cancelled"], WAIT, message="cancelled")
    wait_until(lambda: statuses(store, [child]) == ["cancelled"], WAIT, message="child too")
    worker.send_signal(signal.SIGTERM)
    code, output = finish(worker)
    assert code == 0, output
    assert not (workdir / f"ran-{child}-1").exists()


def _lines_of(output: str, job_id: int) -> str:
    return "\n".join(line for line in output.splitlines() if f'"job_id": {job_id},' in line)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[-1][:1] != "Z"
    return True


def test_a_sigkilled_workers_job_is_settled_once_its_lease_ends_and_run_by_the_next_worker(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    # chores_lease: the dead worker held the cluster-chores lease; with the default (60 s)
    # the next worker waits that long before it may settle anything. Pool timeout 2 s:
    # the lease is timeout + 30 s.
    write_config(
        workdir,
        pool_timeout=2,
        heartbeat_interval=0.5,
        process_stale_after=2,
        check_interval=0.5,
        chores_lease=2,
    )
    job_id = queue.enqueue("t.block", {"dir": str(workdir)})
    first = start()
    wait_until(lambda: running_job(store, job_id), WAIT, message="the job to be running")
    wait_until(lambda: (workdir / f"started-{job_id}-1").exists(), WAIT, message="handler start")
    os.killpg(first.pid, signal.SIGKILL)
    assert finish(first)[0] == -signal.SIGKILL
    assert running_job(store, job_id)  # nobody settled it yet: its holder just vanished
    (workdir / "release").write_text("")  # the next attempt runs straight through
    second = start()
    # A stale heartbeat does not prove death (a host cut off from the database still
    # runs its jobs): while the lease lives, nobody else may take the job. Guarantee 2.
    wait_until(
        lambda: not store.list_processes() or len(store.list_processes()) == 1,
        WAIT,
        message="the dead worker's row pruned as stale",
    )
    time.sleep(2)
    assert running_job(store, job_id), "settled while its lease was still live"
    wait_until(lambda: statuses(store, [job_id]) == ["done"], 60, message="the job to be run again")
    (row,) = jobs(store, [job_id])
    assert row.attempts == 2
    assert row.last_error is not None
    assert "lease expired" in row.last_error or "stopped beating" in row.last_error
    assert (workdir / f"ran-{job_id}-2").exists()
    second.send_signal(signal.SIGTERM)
    assert finish(second)[0] == 0


def test_a_handler_module_that_fails_to_import_exits_78(
    start: Start, workdir: Path, queue: Queue, store: Store
) -> None:
    job_id = queue.enqueue("t.record", {"dir": str(workdir)})
    (workdir / "workhandlers.py").write_text("raise ImportError('half deployed')\n")
    code, output = finish(start("--burst"))
    assert code == 78, output
    assert "workhandlers" in output and "half deployed" in output and "Traceback" not in output
    assert statuses(store, [job_id]) == ["ready"]
