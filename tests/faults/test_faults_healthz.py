"""/healthz while the database hangs: a private mariadbd SIGSTOPped (connections open,
nothing answers) under a daemon serving [metrics]. SPEC: 503 once the database has not
answered the master for two check intervals (at least 5 s), with the reason; 200 again
once it answers. Before the fix it stayed 200 until the check tick was killed (~60 s).
"""

from __future__ import annotations

import os
import signal
import urllib.error
import urllib.request
from typing import Any

import pytest
from daemon_util import Daemon, render_config
from private_mariadb import (  # noqa: F401 - fixtures
    PrivateMariaDB,
    private_db_url,
    private_mariadb,
)
from util import free_tcp_port, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(180)]

LIMIT = 5.0  # two check intervals of 1 s, raised to the 5 s floor
SLACK = 10.0  # the master's breaker, a loop turn, a scrape: a deadline, not a measure


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def test_healthz_turns_503_while_the_database_server_is_stopped(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    daemons: Any,
) -> None:
    port = free_tcp_port()
    daemon: Daemon = daemons(
        private_db_url, pools={"work": {"workers": 1}}, supervisor={"check_interval": 1}
    )
    text = render_config(daemon.db_url, daemon.pools, daemon.supervisor)
    daemon.write_config(text=text + f'\n[metrics]\nlisten = "127.0.0.1:{port}"\n')
    daemon.start().wait_ready()
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: get(base + "/healthz")[0] == 200, timeout=20, message="/healthz 200")

    server_pid = private_mariadb.pid
    assert server_pid is not None
    os.kill(server_pid, signal.SIGSTOP)
    try:
        _, reason = wait_until(
            lambda: (answer := get(base + "/healthz"))[0] == 503 and answer,
            timeout=LIMIT + SLACK,
            message=f"/healthz 503 while the database is stopped ({daemon.describe()})",
        )
        assert "the database has not answered the master for" in reason, reason
        assert get(base + "/metrics")[0] == 200  # a scrape never waits on the database
    finally:
        os.kill(server_pid, signal.SIGCONT)
    wait_until(lambda: get(base + "/healthz")[0] == 200, timeout=30, message="/healthz 200 again")
    assert daemon.alive()
    assert daemon.stop() == 0, daemon.describe()
