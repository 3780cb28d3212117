"""The master's database circuit breaker (daemon/dbguard.py) against a real SQLite file
that another connection keeps write-locked, as the master meets it on a busy host."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from supervisor import events
from supervisor.daemon.dbguard import DbGuard
from supervisor.errors import TransientDatabaseError
from supervisor.store import Store, open_store

TIMEOUT = 0.2  # the master's store timeout in this test (DB_TIMEOUT is 0.75 s)


class Said:
    """The guard's log: what it said, by event name."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.events.append(event)


@pytest.fixture
def store(sqlite_db_url: str) -> Iterator[Store]:
    made = open_store(sqlite_db_url, timeout=TIMEOUT)
    yield made
    made.close()


@pytest.fixture
def write_lock(store: Store) -> Iterator[sqlite3.Connection]:
    """Another process's connection holding the write lock (reads go on in WAL)."""
    holder = sqlite3.connect(store.path, isolation_level=None)  # type: ignore[attr-defined]
    holder.execute("BEGIN EXCLUSIVE")
    yield holder
    holder.close()


def guard(log: Said, stopping: list[bool]) -> DbGuard:
    return DbGuard(log, TIMEOUT, lambda now: None, lambda: stopping[0], lambda: None)


def counted(store: Store, calls: list[int]) -> Any:
    def write() -> int:
        calls.append(1)
        return store.remove_processes(["nobody"])

    return write


def test_a_write_lock_that_outlasts_the_timeout_opens_the_breaker(
    store: Store, write_lock: sqlite3.Connection
) -> None:
    log, calls, stopping = Said(), [], [False]
    breaker = guard(log, stopping)
    assert breaker.call(counted(store, calls)) is None
    assert calls == [1] and breaker.error is not None and "locked" in breaker.error
    assert log.events == [events.DB_UNREACHABLE]
    # Skipped, not waited for: the next calls before the back-off, and any while stopping.
    assert breaker.call(counted(store, calls)) is None
    stopping[0] = True
    breaker.retry_at = 0.0
    assert breaker.call(counted(store, calls)) is None
    assert calls == [1]
    # The lock is gone and the back-off has passed: the call goes through, the breaker closes.
    write_lock.execute("ROLLBACK")
    stopping[0] = False
    assert breaker.call(counted(store, calls)) == 0
    assert calls == [1, 1] and breaker.error is None
    assert log.events == [events.DB_UNREACHABLE, events.DB_REACHABLE_AGAIN]


def test_a_call_that_fails_at_once_opens_nothing() -> None:
    """A deadlock is answered at once: the database answers, the next call goes through."""
    log, calls = Said(), []

    def deadlock() -> int:
        calls.append(1)
        raise TransientDatabaseError("Deadlock found when trying to get lock")

    breaker = guard(log, [False])
    assert breaker.call(deadlock) is None
    assert breaker.error is None
    assert breaker.call(deadlock) is None
    assert calls == [1, 1] and log.events == [events.DB_CALL_FAILED, events.DB_CALL_FAILED]
