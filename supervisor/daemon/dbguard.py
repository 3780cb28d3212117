"""The master's database circuit breaker.

A silent server makes every call block for the store's timeout, and a loop turn makes
several calls, which must not delay kills and signals for long. So after a lost
connection, or a call that blocked for its whole timeout (a MariaDB that does not
answer, a SQLite file another process keeps write-locked: "database is locked"), calls
are skipped until a back-off retry time, and never tried while a stop waits or an
overtime kill falls due within one timeout (`may_retry_db`). A call that failed at once
(a deadlock) opens nothing. Once the database answers again every call goes through.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from supervisor import events
from supervisor.daemon.decisions import may_retry_db
from supervisor.errors import ConnectionLost, DatabaseError
from supervisor.observe import metrics

T = TypeVar("T")


class DbGuard:
    def __init__(
        self,
        log: Any,
        timeout: float,
        before_call: Callable[[float], None],
        stop_requested: Callable[[], bool],
        next_kill: Callable[[], float | None],
    ) -> None:
        self.log = log
        self.timeout = timeout
        self.before_call = before_call  # e.g. overtime kills: a slow database never delays one
        self.stop_requested = stop_requested
        self.next_kill = next_kill
        self.error: str | None = None  # set while the database is unreachable
        self.answered_at = time.monotonic()  # the last call that answered (the store opened)
        self.backoff = 0.0
        self.retry_at = 0.0
        self.reachable_again: Callable[[], None] = lambda: None  # the master wakes its children

    def call(self, operation: Callable[[], T]) -> T | None:
        """Run a master DB call; None when it failed or was skipped."""
        now = time.monotonic()
        self.before_call(now)
        if self.error is not None and not may_retry_db(
            now, self.retry_at, self.stop_requested(), self.next_kill(), self.timeout
        ):
            return None
        started = time.monotonic()
        try:
            result = operation()
        except ConnectionLost as exc:
            self.unreachable(str(exc))
            return None
        except DatabaseError as exc:
            if time.monotonic() - started >= self.timeout:  # it waited in vain: as good as silent
                self.unreachable(str(exc))
                return None
            metrics.db_error()  # reachable, but this call failed (e.g. a deadlock)
            self.log.warning(events.DB_CALL_FAILED, error=str(exc))
            return None
        self.answered_at = time.monotonic()
        if self.error is not None:
            self.log.info(events.DB_REACHABLE_AGAIN)
            self.error, self.backoff = None, 0.0
            self.reachable_again()
        return result

    def unreachable(self, error: str) -> None:
        """Open the breaker: no call until the back-off has passed."""
        metrics.db_error()
        if self.error is None:
            self.log.error(events.DB_UNREACHABLE, error=error)
        self.error = error
        self.backoff = min(self.timeout, max(0.5, self.backoff * 2))
        self.retry_at = time.monotonic() + self.backoff
