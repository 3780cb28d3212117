"""faults/: fault injection, every test marked `faults` (`make test-faults`, `pytest -m
faults`): killed processes, database servers killed -9, stopped or cut off, a clock an hour
off. Most run against a private MariaDB of their own (private_mariadb.py).

The fixtures several of these files need live here: daemons on a URL of the test's
choosing (`daemons`), a silent proxy in front of the private server (`partition`) and a
webhook receiver on loopback (`webhook`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_util import Daemon
from private_mariadb import (  # noqa: F401 - fixtures
    Partition,
    PrivateMariaDB,
    Webhook,
    private_db_url,
    private_mariadb,
)


@pytest.fixture
def partition(private_mariadb: PrivateMariaDB) -> Iterator[Partition]:  # noqa: F811
    proxy = Partition(private_mariadb.port)
    yield proxy
    proxy.close()


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    yield hook
    hook.close()


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """`daemons(db_url, name=..., pools=..., supervisor=...)` -> a configured, not yet
    started Daemon in a directory of its own; every one is killed, group and all, at
    teardown, pass or fail."""
    made: list[Daemon] = []

    def make(db_url: str, name: str | None = None, **kwargs: Any) -> Daemon:
        name = name or f"daemon{len(made)}"
        daemon = Daemon(tmp_path / name, db_url, name=name, **kwargs)
        made.append(daemon)
        return daemon

    yield make
    for daemon in made:
        daemon.kill_all()
