"""daemon/: the real daemon (`forkq run`, `forkq work`) and `forkq` subprocesses, judged
from outside: the tables, the JSON log, process titles, exit statuses.

Daemons come from daemon_util.py: `Daemon`, and the `daemons` fixture, registered here for
every test of this folder (modules that import `daemons_fixture` themselves get the same
one), which kills every process of every daemon's session at teardown.
"""

from __future__ import annotations

import pytest
from daemon_util import daemons_fixture  # noqa: F401  (the `daemons` fixture)
from util import backend_of


@pytest.fixture
def backend(db_url: str) -> str:
    """Which backend `db_url` is this time: "sqlite" or "mysql"."""
    return backend_of(db_url)
