"""The leader's extra chores on each check tick: due schedules and backlog alerts.

Kept apart from the arbiter so master.py stays about processes. Both run only on the
host that holds the cluster chores lease, so N app servers send one alert and
enqueue each schedule slot once (the slot row makes that exact even across a
lease hand-over).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from . import logs
from .alerts import Snapshot
from .errors import DatabaseError
from .notify import AlertRunner
from .schedules import enqueue_due

if TYPE_CHECKING:
    from .master import Master


class Extras:
    def __init__(self, master: Master) -> None:
        self.started_at = time.time()
        self.alerts = AlertRunner()
        self.log = logs.get(role="master")

    def tick(self, master: Master, leader: bool) -> None:
        now = time.time()
        if leader and master.config.schedules:
            try:
                for name, slot, job_id in enqueue_due(
                    master.store,
                    master.config.schedules,
                    now,
                    self.started_at,
                    master.config.supervisor.check_interval,
                ):
                    self.log.info("schedule_enqueued", schedule=name, slot=slot, job_id=job_id)
            except DatabaseError as exc:
                self.log.warning("schedules_skipped", error=str(exc))
        # An unreachable database is alerted by every host (no shared state to agree on).
        if leader or master.db_error:
            self.alerts.run(master.store, master.config.alerts, self.snapshot(master), now)

    def snapshot(self, master: Master) -> Snapshot:
        queues = [] if master.db_error else (master.db(master.store.stats) or [])
        return Snapshot(
            host=master.host,
            queues=queues,
            saturated_ticks={name: p.saturated_ticks for name, p in master.pools.items()},
            crash_looping={name for name, p in master.pools.items() if p.crash_looping},
            db_error=master.db_error,
        )
