"""What the master's parts share: one object, made by the master and updated in place.

`Pooling`, `Settling` and `CheckTicks` are built once with this object (and the few
callables they need of the master), never with the master itself. A reload replaces the
config, the store and the pools on it; a check tick's report replaces the paused queues
and the clock offset; a stop sets `stopping`. A part reads them here, so it always sees
the current ones; a unit test builds one without a master (tests/unit/test_daemon_parts.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from supervisor.config import Config
from supervisor.daemon.dbguard import DbGuard
from supervisor.daemon.state import PoolState
from supervisor.store import Store

T = TypeVar("T")


@dataclass(eq=False)
class Shared:
    config: Config
    store: Store
    log: Any
    guard: DbGuard  # the master's database calls go through it (db below)
    host: str
    name: str  # the master's process name
    node: str  # the machine and pid namespace our pids mean something in (proc.node_id)
    pools: dict[str, PoolState]
    paused: set[str] = field(default_factory=set)
    # The database clock minus ours, learned at boot and at every tick: schedules and
    # alert cooldowns are judged on the database clock, also while it cannot be read.
    clock_offset: float = 0.0
    started_at: float = field(default_factory=time.time)  # on the DB clock after boot
    stopping: bool = False

    def db(self, operation: Callable[[], T]) -> T | None:
        """A master DB call through the circuit breaker; None when it failed or was skipped."""
        return self.guard.call(operation)
