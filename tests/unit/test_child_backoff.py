"""A pool child's back-off after a lost database ends when the master says the database
answers again (a byte on the child's wake pipe, `Children.wake_all`): what the child
finished is written before its lease runs out, not up to a whole back-off (10 s and
more) later, when the lease reaper may have given the job to another worker."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

import pytest

from supervisor.config import Config, PoolConfig
from supervisor.daemon.child import PoolWorker
from supervisor.dburl import parse_database_url
from supervisor.store import open_store
from supervisor.work.worker import BACKOFF_FLOOR

LONG = 30.0  # a back-off the test must not wait out


@pytest.fixture
def child(sqlite_db_url: str) -> Iterator[tuple[PoolWorker, int]]:
    """A pool child's worker and the master's end of its wake pipe."""
    store = open_store(sqlite_db_url)
    config = Config(database=parse_database_url(sqlite_db_url), pools=(PoolConfig(name="q"),))
    worker = PoolWorker(store, config, ["q"], "host:1:backoff")
    read, write = os.pipe()
    worker.wake_fd = read
    yield worker, write
    store.close()
    for fd in (read, write):
        with contextlib.suppress(OSError):
            os.close(fd)


def test_a_byte_on_the_wake_pipe_ends_the_back_off(child: tuple[PoolWorker, int]) -> None:
    worker, master_end = child
    # Deep in a back-off after a lost connection: a failed try after the wake-up waits
    # little, and a try that works still says it reconnected (backoff not 0)
    worker.backoff, worker.lost = 10.0, True
    timer = threading.Timer(0.2, lambda: os.write(master_end, b"w"))
    timer.start()
    started = time.monotonic()
    worker.sleep(LONG)
    timer.join()
    assert time.monotonic() - started < LONG / 2 and worker.backoff == BACKOFF_FLOOR[True]


def test_a_master_gone_neither_spins_nor_ends_the_back_off(child: tuple[PoolWorker, int]) -> None:
    """EOF on the wake pipe (the master died): the back-off is slept out as before, and
    the pipe is not read again (the orphan guard stops the worker)."""
    worker, master_end = child
    os.close(master_end)
    started = time.monotonic()
    worker.sleep(0.3)
    assert time.monotonic() - started >= 0.3 and worker.wake_fd == -1


def test_stopping_ends_the_back_off(child: tuple[PoolWorker, int]) -> None:
    worker, _ = child
    threading.Timer(0.2, lambda: setattr(worker, "stopping", True)).start()
    started = time.monotonic()
    worker.sleep(LONG)
    assert time.monotonic() - started < LONG / 2
