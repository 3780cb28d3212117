"""store/: the store contract and the producer side, on both backends (`db_url` runs each
test on SQLite and on MariaDB; `mysql_db_url` / `sqlite_db_url` for one backend).

In-process only: the store, `Queue`, the worker's `work_once`, the CLI's `main`, the
Django backend and PHP's PDO against the test's database. Nothing here starts a daemon
(daemon/) or kills a database server (faults/).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from supervisor import Queue


@pytest.fixture
def producer(mysql_db_url: str) -> Iterator[Queue]:
    """A long-lived producer on the shared MariaDB, as a web app keeps one per process."""
    queue = Queue(mysql_db_url)
    yield queue
    queue.close()
