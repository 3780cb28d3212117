"""A long-lived producer outlives its server (issue 12, item 6), on a private MariaDB:
the server restarted (killed -9 or shut down) or timing the idle connection out
(`wait_timeout`) between two enqueues. The statement had not been sent, so forkq opens
a new connection and sends it there; the app never sees an error. Connections killed
from another session, on the shared server: tests/store/test_reconnect.py.
"""

from __future__ import annotations

import pytest
from private_mariadb import PrivateMariaDB, private_db_url, private_mariadb  # noqa: F401
from util import wait_until

from supervisor import Queue
from supervisor.store.mysql import MySQLStore

pytestmark = pytest.mark.timeout(180)


def connection_id(queue: Queue) -> int:
    """The server's id of the queue's own connection (the one the app holds)."""
    store = queue.store
    assert isinstance(store, MySQLStore)
    return int(store._connection().thread_id())


# --- a private server: restarted, and timing connections out -------------------------------------


@pytest.mark.faults
@pytest.mark.parametrize("how", ["kill -9", "shutdown"])
def test_the_first_enqueue_after_a_server_restart_goes_through(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    how: str,
) -> None:
    queue = Queue(private_db_url)
    try:
        queue.enqueue("t.noop", {"n": 1})
        if how == "kill -9":
            private_mariadb.kill9()
        else:
            private_mariadb.stop()
        private_mariadb.start()
        queue.enqueue("t.noop", {"n": 2})
        jobs = private_mariadb.admin(
            f"SELECT COUNT(*) FROM `{private_mariadb.database}`.forkq_jobs"
        )
        assert jobs[0][0] == 2
    finally:
        queue.close()


@pytest.mark.faults
def test_the_first_enqueue_after_the_server_timed_the_connection_out_goes_through(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
) -> None:
    private_mariadb.admin("SET GLOBAL wait_timeout = 1")
    queue = Queue(private_db_url)
    try:
        queue.enqueue("t.noop", {"n": 1})
        conn_id = connection_id(queue)
        wait_until(
            lambda: not [c for c in private_mariadb.connections() if c["ID"] == conn_id],
            timeout=30,
            message="the server timing the idle connection out",
        )
        queue.enqueue("t.noop", {"n": 2})
    finally:
        queue.close()
        private_mariadb.admin("SET GLOBAL wait_timeout = 28800")
    jobs = private_mariadb.admin(f"SELECT COUNT(*) FROM `{private_mariadb.database}`.forkq_jobs")
    assert jobs[0][0] == 2
