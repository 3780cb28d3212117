"""A command handler snoozes (issues 15 and 16), in the real daemon, on both backends.

Exit 75 with `forkq-snooze: DURATION` as the last stderr line is Python's Snooze: the
job comes back after the delay with its attempt given back and the snooze counted, and
past the table's `max_snoozes` it ends dead. `forkq-retry-after:` beside it is a retry
that uses an attempt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from command_util import QUEUE, command_daemon, status_is, wait_job
from daemon_util import Daemon, daemons_fixture  # noqa: F401  (the `daemons` fixture)

from supervisor import Queue, events
from supervisor.store import Store, open_store

pytestmark = pytest.mark.timeout(120)


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


def exit_75(last_line: str) -> list[str]:
    return ["sh", "-c", f"echo 'the export is not there yet' >&2; echo '{last_line}' >&2; exit 75"]


def test_exit_75_with_forkq_snooze_comes_back_later_without_using_an_attempt(
    daemons: Callable[..., Daemon], store: Store, queue: Queue
) -> None:
    daemon = command_daemon(
        daemons,
        {
            "t.later": {"argv": exit_75("forkq-snooze: 2m"), "queue": QUEUE},
            "t.again": {"argv": exit_75("forkq-snooze: 0"), "queue": QUEUE, "max_snoozes": 2},
            "t.retry": {"argv": exit_75("forkq-retry-after: 2m"), "queue": QUEUE},
        },
    )
    daemon.start().wait_ready()
    later = queue.enqueue("t.later", {}, queue=QUEUE)
    again = queue.enqueue("t.again", {}, queue=QUEUE)
    retry = queue.enqueue("t.retry", {}, queue=QUEUE)

    row = wait_job(store, later, lambda r: r.snoozes == 1, daemon)
    assert row.attempts == 0  # given back
    assert str(row.status) in ("scheduled", "ready")
    assert 100 <= row.run_at.timestamp() - store.db_now() <= 120
    [finished] = daemon.events(events.JOB_FINISHED, job_id=later)
    assert finished["outcome"] == "snoozed"

    # snoozes at once, twice, then is past the table's max_snoozes = 2: dead
    row = wait_job(store, again, status_is("dead"), daemon)
    assert row.snoozes == 2
    assert row.last_error is not None and "max_snoozes" in row.last_error
    # Its last line says what became of it (dead), as the metric does, not "snoozed".
    ends = daemon.wait_event(events.JOB_FINISHED, where=lambda e: e.get("job_id") == again, count=3)
    assert [e["outcome"] for e in ends] == ["snoozed", "snoozed", "dead"], ends
    assert ends[-1]["level"] == "warning", ends

    row = wait_job(store, retry, lambda r: r.last_error is not None, daemon)
    assert (row.attempts, row.snoozes) == (1, 0)  # a retry uses its attempt
    assert daemon.stop() == 0, daemon.describe()
