"""Command handlers and the kills (issue 16 item 1), in the real daemon, on both backends.

The program runs in the pool child's process group (supervisor/work/command.py says
why). So:

- the child's soft timeout kills the program's whole tree at `timeout`, even a program
  that ignores SIGTERM and its grandchildren (one in the group, one in a session of
  its own), with SIGKILL after a grace; the child goes on (no master kill, no respawn);
- the master's group kill (`kill_group(child pid, ...)`, what an overtime kill and a
  cancel send) reaches the program and its group at once;
- a retire SIGTERM (the child's pid alone: HUP, a graceful stop) lets the program
  finish its job.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from command_util import (
    QUEUE,
    alive,
    command_daemon,
    kill_noted,
    noted_pids,
    script,
    status_is,
    wait_all_gone,
    wait_job,
)
from daemon_util import Daemon, daemons_fixture  # noqa: F401  (the `daemons` fixture)

from supervisor import Queue, events
from supervisor.proc import kill_group
from supervisor.store import Store, open_store

pytestmark = pytest.mark.timeout(120)

# Notes its pid and two grandchildren's in $PIDS, all deaf to SIGTERM: one stays in the
# group, one moves to a session of its own (setsid); then runs until it is killed.
DEAF = """\
trap '' TERM
sh -c 'echo $$ >> "$PIDS"; exec sleep 300' &
setsid sh -c 'echo $$ >> "$PIDS"; exec sleep 300' &
echo $$ >> "$PIDS"
while :; do sleep 0.05; done
"""

# Notes its pid and a grandchild's, both with the default SIGTERM; sleeps a long time.
SLEEPER = """\
sh -c 'echo $$ >> "$PIDS"; exec sleep 300' &
echo $$ >> "$PIDS"
sleep 300
"""

# Runs for a moment and leaves proof that it finished.
FINISHER = """\
echo $$ >> "$PIDS"
sleep 1.5
echo finished > "$DONE"
"""


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    made = open_store(db_url)
    yield made
    made.close()


@pytest.fixture
def queue(db_url: str) -> Iterator[Queue]:
    made = Queue(db_url, wake=False)
    yield made
    made.close()


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pids"
    yield path
    kill_noted(path)


def test_timeout_kills_a_sigterm_deaf_program_and_its_grandchildren(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path, pids: Path
) -> None:
    daemon = command_daemon(
        daemons,
        {
            "t.deaf": {
                "argv": [script(tmp_path, "deaf.sh", DEAF)],
                "queue": QUEUE,
                "timeout": 1,
                "max_attempts": 1,
                "env": {"PIDS": str(pids)},
            }
        },
    )
    daemon.start().wait_ready()
    [child] = daemon.pool_children(QUEUE)
    job_id = queue.enqueue("t.deaf", {}, queue=QUEUE)
    started = noted_pids(pids, 3)
    row = wait_job(store, job_id, status_is("dead"), daemon)
    assert row.last_error == "timed out after 1s (attempt 1 of 1)"
    wait_all_gone(started)
    [killed] = daemon.events(events.COMMAND_KILLED, job_id=job_id)
    assert killed["reason"] == "JobTimeout"
    assert killed["sigkilled"] >= 2  # the program and its group's grandchild ignored SIGTERM
    # The child's own soft timeout did it: the master killed nobody, the child lives on.
    assert daemon.events(events.JOB_TIMED_OUT) == []
    assert daemon.pool_children(QUEUE) == [child]
    assert daemon.stop() == 0, daemon.describe()


def test_the_masters_group_kill_reaches_the_program_and_its_group(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path, pids: Path
) -> None:
    """What an overtime kill and a cancel send: SIGTERM to the child's process group."""
    daemon = command_daemon(
        daemons,
        {
            "t.sleeper": {
                "argv": [script(tmp_path, "sleeper.sh", SLEEPER)],
                "queue": QUEUE,
                "timeout": 60,
                "env": {"PIDS": str(pids)},
            }
        },
    )
    daemon.start().wait_ready()
    [child] = daemon.pool_children(QUEUE)
    job_id = queue.enqueue("t.sleeper", {}, queue=QUEUE)
    started = noted_pids(pids, 2)
    assert kill_group(child, signal.SIGTERM)
    wait_all_gone(started, timeout=10)  # long before the job's 60 s timeout
    row = wait_job(store, job_id, lambda r: r.last_error is not None, daemon)
    assert row.last_error is not None and row.last_error.startswith("killed by SIGTERM")
    assert str(row.status) != "done"
    assert daemon.stop() == 0, daemon.describe()


def test_a_retiring_child_lets_its_program_finish(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path, pids: Path
) -> None:
    """A graceful stop SIGTERMs the child alone: the running program is not touched."""
    done = tmp_path / "done"
    daemon = command_daemon(
        daemons,
        {
            "t.finisher": {
                "argv": [script(tmp_path, "finisher.sh", FINISHER)],
                "queue": QUEUE,
                "env": {"PIDS": str(pids), "DONE": str(done)},
            }
        },
    )
    daemon.start().wait_ready()
    job_id = queue.enqueue("t.finisher", {}, queue=QUEUE)
    [program] = noted_pids(pids, 1)
    assert daemon.stop() == 0  # SIGTERM to the master: it retires its children
    assert not alive(program)
    assert done.read_text() == "finished\n"
    row = store.get_job(job_id)
    assert row is not None and str(row.status) == "done"


def test_cancel_kills_the_running_program_and_its_group(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path, pids: Path
) -> None:
    """`forkq cancel` / Queue.cancel of a running command: its master signals the child's
    group, which the program is in: the program and its grandchild die, the job ends
    cancelled, never retried. Its log says so once, as the master's `job_cancelled`: the
    child, whose program died of the kill, logs no `job_finished` as a retry and no
    `lease_lost` (its failure's write did not take: the row was cancelling)."""
    daemon = command_daemon(
        daemons,
        {
            "t.sleeper": {
                "argv": [script(tmp_path, "sleeper.sh", SLEEPER)],
                "queue": QUEUE,
                "timeout": 60,
                "env": {"PIDS": str(pids)},
            }
        },
    )
    daemon.start().wait_ready()
    job_id = queue.enqueue("t.sleeper", {}, queue=QUEUE)
    started = noted_pids(pids, 2)
    assert queue.cancel(job_id)
    wait_all_gone(started, timeout=15)  # long before the job's 60 s timeout
    row = wait_job(store, job_id, status_is("cancelled"), daemon)
    assert row.attempts == 1
    assert daemon.stop() == 0, daemon.describe()
    assert len(daemon.events(events.JOB_CANCELLED, job_id=job_id)) == 1, daemon.describe()
    assert daemon.events(events.JOB_FINISHED, job_id=job_id) == [], daemon.describe()
    assert daemon.events(events.LEASE_LOST) == [], daemon.describe()


# Says what it waits for on stderr, then waits past its timeout.
TALKER = """\
echo $$ >> "$PIDS"
echo "connecting to smtp.example.com" >&2
echo "still waiting for the SMTP greeting" >&2
sleep 300
"""


def test_a_program_killed_for_its_timeout_keeps_its_stderr_in_last_error(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path, pids: Path
) -> None:
    """SPEC: the last 4 KB of stderr go into last_error also when the command was killed
    for its timeout, summarized (its first line) by the last non-empty one."""
    table = {
        "argv": [script(tmp_path, "talker.sh", TALKER)],
        "queue": QUEUE,
        "timeout": 1,
        "max_attempts": 1,
        "env": {"PIDS": str(pids)},
    }
    daemon = command_daemon(daemons, {"t.talker": table})
    daemon.start().wait_ready()
    job_id = queue.enqueue("t.talker", {}, queue=QUEUE)
    row = wait_job(store, job_id, status_is("dead"), daemon)
    assert row.last_error is not None
    lines = row.last_error.splitlines()
    assert lines[0] == "timed out after 1s: still waiting for the SMTP greeting"
    assert lines[1:] == [
        "connecting to smtp.example.com",
        "still waiting for the SMTP greeting (attempt 1 of 1)",
    ]
    assert daemon.stop() == 0, daemon.describe()
