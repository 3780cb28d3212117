"""daemon/: the real daemon (`forkq run`, `forkq work`) and `forkq` subprocesses, judged
from outside: the tables, the JSON log, process titles, exit statuses.

Daemons come from daemon_util.py (`Daemon`, and the `daemons` fixture a module imports as
`daemons_fixture`), which kills every process of every daemon's session at teardown.
"""

from __future__ import annotations

import pytest
from util import backend_of


@pytest.fixture
def backend(db_url: str) -> str:
    """Which backend `db_url` is this time: "sqlite" or "mysql"."""
    return backend_of(db_url)
