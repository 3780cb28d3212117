"""Ready jobs in a queue no pool of this config serves: said once in the master's log.

Only `forkq status -c` said so before; a daemon whose config lacks the queue's pool let
its jobs wait without a word. The figures are those the master already has: the check
tick's (the chores holder's, which reads them for its alerts anyway; other hosts' ticks
read none, and keep what they knew). No read of its own at boot: counting up to the
tick's cap there (10,000 rows a queue) would cost most when a restart meets a backlog;
the first tick, one check_interval later, says it. A
queue is logged when it first shows up unserved and again only after it stopped being
so (no ready job left, or a reload gave it a pool), never on every tick. On a cluster
another host's config may serve the queue: the line says "this config", no more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from supervisor import events
from supervisor.config import Config
from supervisor.models import QueueStats

NOTE = "no pool of this config serves it (another host's config may)"


def unserved(config: Config, queues: Iterable[QueueStats]) -> dict[str, QueueStats]:
    """The queues with ready jobs that no pool of `config` works, by name."""
    return {q.queue: q for q in queues if q.ready > 0 and config.pool(q.queue) is None}


@dataclass
class UnservedQueues:
    """What the master has said: the queues it last saw unserved."""

    known: set[str] = field(default_factory=set)

    def seen(self, config: Config, queues: Iterable[QueueStats], log: Any) -> None:
        """Log each queue newly unserved (queue_unserved)."""
        now = unserved(config, queues)
        fresh = sorted(now.keys() - self.known)
        for name in fresh:
            stats = now[name]
            capped = {"ready_capped": True} if "ready" in stats.capped else {}
            log.warning(
                events.QUEUE_UNSERVED,
                queue=name,
                ready=stats.ready,
                **capped,
                config=config.source,
                note=NOTE,
            )
        self.known = set(now)


def from_report(queues: list[dict[str, Any]]) -> list[QueueStats]:
    """The tick report's queue figures (QueueStats.as_dict()) as QueueStats again."""
    return [QueueStats(**{**q, "capped": frozenset(q.get("capped", ()))}) for q in queues]
