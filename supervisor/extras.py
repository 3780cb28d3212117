"""Extra chores on each check tick: due schedules and backlog alerts.

Kept apart from the arbiter so master.py stays about processes. Schedules and the
cluster-wide alert rules (backlog, age, dead jobs) run only on the host that holds
the chores lease, so N app servers send one alert and enqueue each slot once (the
slot row makes that exact even across a lease hand-over). Host-local rules
(saturated pool, crash loop, database unreachable) are judged on every host.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from . import logs
from .errors import DatabaseError

if TYPE_CHECKING:
    from .alerts import Snapshot
    from .master import Master
    from .notify import AlertRunner


class Extras:
    def __init__(self, master: Master) -> None:
        self.started_at = time.time()
        self._alerts: AlertRunner | None = None
        self.log = logs.get(role="master")

    @property
    def alerts(self) -> AlertRunner:
        # Imported at the first check tick, not at boot: alerts, mail and HTTP modules
        # would otherwise delay the first fork.
        if self._alerts is None:
            from .notify import AlertRunner

            self._alerts = AlertRunner()
        return self._alerts

    def tick(self, master: Master, leader: bool) -> None:
        # The database clock, so hosts with skewed clocks agree on cooldowns and due slots.
        now = master.db(master.store.db_now) or time.time()
        if leader and master.config.schedules:
            self.enqueue_schedules(master, now)
        snapshot = dataclasses.replace(self.snapshot(master), cluster=leader)
        self.alerts.run(master.store, master.config.alerts, snapshot, now)

    def enqueue_schedules(self, master: Master, now: float) -> None:
        # Two check intervals of grace: a tick delayed by a slow SMTP server or a lease
        # hand-over must not make misfire = "skip" drop a slot that is only just due.
        from .schedules import enqueue_due

        grace = 2 * master.config.supervisor.check_interval
        try:
            for name, slot, job_id in enqueue_due(
                master.store, master.config.schedules, now, self.started_at, grace
            ):
                when = datetime.fromtimestamp(slot, UTC).isoformat()
                self.log.info("schedule_enqueued", schedule=name, slot=when, job_id=job_id)
        except DatabaseError as exc:
            self.log.warning("schedules_skipped", error=str(exc))

    def snapshot(self, master: Master) -> Snapshot:
        from .alerts import Snapshot

        queues = [] if master.db_error else (master.db(master.store.stats) or [])
        return Snapshot(
            host=master.host,
            queues=queues,
            saturated_ticks={name: p.saturated_ticks for name, p in master.pools.items()},
            crash_looping={name for name, p in master.pools.items() if p.crash_looping},
            db_error=master.db_error,
        )
