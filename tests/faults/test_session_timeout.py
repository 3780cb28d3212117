"""The daemon's sessions end on the server when their host vanishes.

A host that crashes, loses power or is cut off never sends the FIN that ends its
connections, so MariaDB keeps their sessions (and their slots of max_connections) until
wait_timeout: 8 hours by default. The daemon's sessions (master, children, check ticks,
`forkq work`) set a session wait_timeout, `[supervisor] db_session_timeout` (600 s by
default); producers' `Queue` sessions keep the server's. A daemon store replaces a
connection idle for most of that time before using it, so the timeout never costs it a
statement.

The vanished host is played by a daemon reaching a private MariaDB through a proxy that
goes silent (`Partition.cut()`: no FIN, no RST reaches the server) and then killed -9,
its whole session. The setting itself: tests/unit/test_session_timeout_setting.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_util import Daemon
from private_mariadb import (  # noqa: F401 - fixtures
    Partition,
    PrivateMariaDB,
    private_db_url,
    private_mariadb,
)
from util import wait_until

from supervisor import Queue
from supervisor.store import open_store

SESSION_TIMEOUT = 3  # seconds: short, so the server's drop is seen within the test
# The server checks wait_timeout while it waits for a client's next statement; this much
# past the timeout is room for a loaded machine, not a figure under test.
SLACK = 30.0


def session_ids(server: PrivateMariaDB) -> set[int]:
    """Server-side sessions of forkq's user (the tests' admin connections are root's)."""
    return {int(row["ID"]) for row in server.connections()}


# --- a store and its server ----------------------------------------------------------------


@pytest.mark.faults
def test_the_server_ends_an_idle_daemon_session_and_the_store_carries_on(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
) -> None:
    producer = open_store(private_db_url)  # the server's default, as Queue has
    daemon = open_store(private_db_url, session_timeout=SESSION_TIMEOUT)
    try:
        producer.db_now()
        before = session_ids(private_mariadb)
        daemon.db_now()
        [ours] = session_ids(private_mariadb) - before
        wait_until(
            lambda: ours not in session_ids(private_mariadb),
            timeout=SESSION_TIMEOUT + SLACK,
            message=f"the server to end the idle session {ours}",
        )
        assert before <= session_ids(private_mariadb)  # the producer's session stays
        # The next statement runs on a new session, with no error on the way.
        assert daemon.db_now() > 0
        [again] = session_ids(private_mariadb) - before
        assert again != ours
    finally:
        daemon.close()
        producer.close()


# --- a daemon whose host vanished ----------------------------------------------------------


@pytest.mark.faults
@pytest.mark.timeout(180)
def test_a_vanished_daemons_sessions_are_ended_by_the_server_a_producers_are_not(
    tmp_path: Path,
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    partition: Partition,
) -> None:
    server = private_mariadb
    url = private_db_url.replace(f":{server.port}/", f":{partition.port}/")
    producer = Queue(url, wake=False)
    daemon = Daemon(
        tmp_path / "daemon",
        url,
        pools={"work": {"workers": 2}},
        supervisor={"db_session_timeout": SESSION_TIMEOUT},
    )
    try:
        producer.enqueue("t.noop", {}, queue="elsewhere")  # opens the producer's session
        producers = session_ids(server)
        assert len(producers) == 1
        daemon.start().wait_ready()
        # The master beats every 0.5 s: its session is open and busy when the host goes.
        wait_until(lambda: session_ids(server) - producers, timeout=20, message="daemon sessions")
        partition.cut()  # from here on nothing of this host reaches the server
        left = session_ids(server) - producers
        assert left, "the daemon had no session open at the cut"
        daemon.kill_all()  # the host is gone: master and children killed -9
        assert not daemon.alive()
        wait_until(
            lambda: not session_ids(server) & left,
            timeout=SESSION_TIMEOUT + SLACK,
            message=f"the server to end the vanished daemon's sessions {sorted(left)}",
        )
        # Silent for as long, behind the same cut: the producer's session is still open.
        assert producers <= session_ids(server)
    finally:
        daemon.kill_all()
        producer.close()
