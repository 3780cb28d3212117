"""The master's first database calls, waited for: a database not there yet is no crash.

After a host reboot systemd often starts forkq before MariaDB answers, and an
application may hold SQLite's write lock for a moment just when the master registers
itself. Both are waited for with a growing back-off and one log line a try, as the
children do (worker.py `safely`); a stop signal during the wait ends it at once. What
waiting cannot fix (no tables, an older schema, a password or a grant the server
refuses) is raised for the CLI to report in one line.
"""

from __future__ import annotations

import random
import select
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from supervisor import events
from supervisor.daemon import systemd
from supervisor.daemon.signals import SignalQueue
from supervisor.errors import (
    ConfigError,
    ConnectionLost,
    DatabaseError,
    DatabaseRefused,
    SchemaError,
    TransientDatabaseError,
)
from supervisor.observe import metrics

if TYPE_CHECKING:
    from supervisor.config import Config
    from supervisor.store import Store

T = TypeVar("T")

MAX_BACKOFF = 5.0  # seconds between two tries at most


def wait_for_database(log: Any, signals: SignalQueue, calls: Callable[[], T]) -> T | None:
    """`calls()` once the database lets it through; None when a stop signal came first."""
    backoff = 0.0
    while not signals.stop_pending():
        try:
            result = calls()
        except (ConnectionLost, TransientDatabaseError) as exc:
            metrics.db_error()
            backoff = min(MAX_BACKOFF, max(0.5, backoff * 2))
            delay = backoff * random.uniform(0.8, 1.2)
            event = (
                events.DB_UNREACHABLE if isinstance(exc, ConnectionLost) else events.DB_CONTENTION
            )
            log.warning(event, error=str(exc), retry_in=round(delay, 2), note="waiting at boot")
            systemd.status(f"waiting for the database: {exc}")
            _sleep(signals, delay)
            continue
        except DatabaseError as exc:
            if isinstance(exc, SchemaError):
                raise
            raise DatabaseRefused(str(exc)) from exc  # the operator's to fix, not a crash
        if backoff:
            log.info(events.DB_RECONNECTED)
        return result
    return None


def checked_store(
    config: Config, current: Config, opener: Callable[[Config], Store]
) -> Store | None:
    """HUP: the store of the database a reloaded config moved to, once it answers with
    forkq's latest schema; None for the same database. What fails refuses the reload
    (ConfigError): the master keeps its database, as it would not boot on that one."""
    if config.database == current.database:
        return None
    store = opener(config)
    try:
        store.require_latest_schema()
    except (SchemaError, DatabaseError) as exc:
        store.close()
        raise ConfigError(f"{exc} ({config.database.redacted()})") from exc
    return store


def _sleep(signals: SignalQueue, seconds: float) -> None:
    """Sleep until `seconds` passed or a stop signal arrived (the wakeup pipe says so)."""
    deadline = time.monotonic() + seconds
    while not signals.stop_pending() and (left := deadline - time.monotonic()) > 0:
        try:
            select.select([signals.wake_r], [], [], left)
        except InterruptedError:
            continue
        signals.drain_wakeups()
