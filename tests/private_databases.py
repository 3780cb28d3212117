"""Two independent private MariaDB primaries as two databases of one forkq config
(issue 24, "several databases"): the home database (`[database]`) on server 1, and
`[databases.reports]` on server 2, each a whole forkq installation with its own
`mariadbd`, data directory and port (tests/private_mariadb.py). Either can be killed -9
and restarted on its data directory while the other goes on.

`databases_config()` writes such a config for tests/daemon_util.py's launcher, and
`wait_idle()` waits for its workers, the grandchildren of `forkq run` there; the
fault tests (tests/faults/test_faults_databases.py) and the bench section
(benchmarks/sections/databases.py) share it. Fixture: `two_databases` (module scope),
both servers destroyed at the end, pass or fail.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import psutil
import pytest
from daemon_util import Daemon, render_config, title_of, toml_value
from private_mariadb import PrivateMariaDB, binaries_missing, unavailable
from util import wait_until

REPORTS = "reports"  # the second database's name in the config


class TwoDatabases:
    """Server 1 holds the home database, server 2 `[databases.reports]`."""

    def __init__(self) -> None:
        self.home = PrivateMariaDB(database="forkq")
        self.reports = PrivateMariaDB(database="forkq_reports")

    @property
    def servers(self) -> tuple[PrivateMariaDB, PrivateMariaDB]:
        return self.home, self.reports

    def start(self) -> TwoDatabases:
        for server in self.servers:
            server.start()
            server.setup_forkq()
        return self

    def reset(self) -> None:
        """Both servers up (a test may have left one down), forkq's tables emptied."""
        for server in self.servers:
            if not server.alive():
                server.start()
            server.empty_tables()

    def destroy(self) -> None:
        try:
            self.reports.destroy()
        finally:
            self.home.destroy()

    def config(
        self,
        pools: dict[str, dict[str, Any]],
        supervisor: dict[str, Any],
        reports_queues: Iterable[str],
    ) -> str:
        """TOML: the home database on server 1, `reports_queues` on server 2."""
        return databases_config(
            self.home.url, {REPORTS: (self.reports.url, reports_queues)}, pools, supervisor
        )


def databases_config(
    home_url: str,
    named: dict[str, tuple[str, Iterable[str]]],
    pools: dict[str, dict[str, Any]],
    supervisor: dict[str, Any],
) -> str:
    """tests/daemon_util.py's config with a `[databases.NAME]` (url, queues) per entry."""
    text = render_config(home_url, pools, supervisor)
    for name, (url, queues) in named.items():
        text += f"\n[databases.{name}]\nurl = {toml_value(url)}\n"
        text += f"queues = {toml_value(list(queues))}\n"
    return text


def rows(server: PrivateMariaDB, columns: str = "id, queue, handler, payload") -> list[Any]:
    """forkq_jobs on one server, by id."""
    return server.admin(f"SELECT {columns} FROM `{server.database}`.forkq_jobs ORDER BY id")


def remaining(server: PrivateMariaDB) -> int:
    """Jobs left on a server (done jobs are deleted with on_success = "delete")."""
    return int(server.admin(f"SELECT COUNT(*) FROM `{server.database}`.forkq_jobs")[0][0])


def worker_titles(daemon: Daemon) -> list[str]:
    """The titles of every pool child of the daemon, whatever master forked it (with
    several databases the process `forkq run` started forks a master per database)."""
    if not daemon.alive():
        raise AssertionError(f"{daemon.name} exited: {daemon.describe()}")
    titles = []
    for process in psutil.Process(daemon.pid).children(recursive=True):
        try:
            title = title_of(process)
        except psutil.Error:
            continue
        if " worker " in title:
            titles.append(title)
    return titles


def wait_idle(daemon: Daemon, timeout: float = 60.0) -> Daemon:
    """Until every pool of the daemon has its `workers` children, all idle."""
    expected = sum(int(p.get("workers", 2)) for p in daemon.pools.values())

    def ready() -> bool:
        titles = worker_titles(daemon)
        return len(titles) == expected and all(t.endswith(" idle") for t in titles)

    wait_until(ready, timeout=timeout, interval=0.05, message=f"{daemon.name}'s workers idle")
    return daemon


@pytest.fixture(scope="module")
def two_databases() -> Iterator[TwoDatabases]:
    missing = binaries_missing()
    if missing:
        unavailable(f"private MariaDB: {missing}")
    pair = TwoDatabases()
    try:
        yield pair.start()
    finally:
        pair.destroy()
