"""faults/: fault injection, every test marked `faults` (`make test-faults`, `pytest -m
faults`): killed processes, database servers killed -9, stopped or cut off, a clock an hour
off. Most run against a private MariaDB of their own (private_mariadb.py).

The fixtures several of these files need live here: a silent proxy in front of the
private server (`partition`) and a webhook receiver on loopback (`webhook`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
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
