"""A child whose write meets a lost or contended database tries again: it never idles with
outcomes it has not written (their jobs would wait out their lease and run again)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from daemon_util import Daemon
from util import wait_until

from supervisor import Queue, events
from supervisor.dburl import parse_database_url

LONG = 300  # the pool's timeout: the lease outlives the test, so only the child can end it


@pytest.mark.parametrize("db_url", ["mysql"], indirect=True)
def test_a_child_whose_acknowledgement_is_lost_writes_it_again(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    """The success waits for the next claim's transaction, whose connection the handler's
    helper ends while it waits on a lock. The child backs off and claims again, writing
    the success; it does not idle until a wake-up that never comes (or the lease's end).
    Galera's two writers met this as deadlocks: the job ran a second time 35 s later."""
    pools = {"work": {"workers": 1, "timeout": LONG, "on_success": "keep"}}
    daemon = daemons(pools=pools).start().wait_ready()
    url = parse_database_url(db_url)
    server = {
        "port": url.port,
        "user": url.user,
        "password": url.password,
        "database": url.database,
    }
    queue = Queue(db_url)
    try:
        job_id = queue.enqueue("t.lose_ack", server, queue="work")

        def done() -> bool:
            row = queue.get(job_id)
            return row is not None and row.status == "done"

        wait_until(done, timeout=30, message=f"the job acknowledged ({daemon.describe()})")
        row = queue.get(job_id)
        assert row is not None and row.attempts == 1, row  # it ran once
    finally:
        queue.close()
    assert daemon.events(events.DB_UNREACHABLE), daemon.describe()  # the connection was lost
    assert daemon.stop() == 0, daemon.describe()
