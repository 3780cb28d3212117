"""Schedules added at runtime (forkq_schedules), beside the config file's [schedules.NAME].

The rows hold what a `[schedules.NAME]` table holds, plus `paused` and `since` (slots due
before it never run; set when added and when resumed, on the database clock). Their slots
go through forkq_schedule_slots like the file's, so each runs once across hosts.
"""

from __future__ import annotations

import json
from typing import Any

from supervisor.config import ScheduleConfig
from supervisor.errors import DuplicateKey, UsageError
from supervisor.store.core import StoreCore


class ScheduleOps(StoreCore):
    """Add, pause, resume, remove and list the schedules added at runtime."""

    def runtime_schedules(self) -> list[ScheduleConfig]:
        """Every schedule added at runtime, by name (a handful of rows)."""
        return [_schedule(r) for r in self._rows("schedule_list")]

    def add_schedule(self, schedule: ScheduleConfig, by: str) -> None:
        """Record a new schedule; UsageError if the name is taken."""
        params = {
            "name": schedule.name,
            "cron": schedule.cron,
            "handler": schedule.handler,
            "queue": schedule.queue,
            "timezone": schedule.timezone,
            "payload": json.dumps(dict(schedule.payload), separators=(",", ":")),
            "priority": schedule.priority,
            "misfire": schedule.misfire,
            "by": by[:191],
        }
        try:
            self._run("schedule_add", **params)
        except DuplicateKey:
            raise UsageError(f"schedule {schedule.name!r} already exists") from None

    def pause_schedule(self, name: str, by: str) -> bool:
        """Pause it; False if it was paused already. UsageError if there is no such row."""
        return self._change("schedule_pause", name, by)

    def resume_schedule(self, name: str, by: str) -> bool:
        """Resume it from now on (slots due while paused never run); False if not paused."""
        return self._change("schedule_resume", name, by)

    def remove_schedule(self, name: str) -> None:
        """Delete it (its slot rows stay: a schedule added again under the name starts anew)."""
        if not self._run("schedule_remove", name=name):
            raise UsageError(f"no schedule {name!r} was added at runtime")

    def _change(self, query: str, name: str, by: str) -> bool:
        if self._run(query, name=name, by=by[:191]):
            return True
        if not any(s.name == name for s in self.runtime_schedules()):
            raise UsageError(f"no schedule {name!r} was added at runtime")
        return False


def _schedule(row: dict[str, Any]) -> ScheduleConfig:
    return ScheduleConfig(
        name=row["name"],
        cron=row["cron"],
        handler=row["handler"],
        timezone=row["timezone"],
        queue=row["queue"],
        payload=json.loads(row["payload"]),
        priority=int(row["priority"]),
        misfire=row["misfire"],
        since=float(row["since"]),
        paused=bool(row["paused"]),
        changed_by=row["changed_by"],
    )
