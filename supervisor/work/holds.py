"""Jobs held under a rate start within `rate_hold` of the instant their claim counted them,
or go back unstarted.

A claim counts every job it takes in its buckets' rate windows at one instant, once it
holds the buckets' rows (the database clock read with the lock: a wait for it comes
before and never counts), the held ones too. The window reaches a slice past the period,
so a job that starts within a slice of that instant is still counted when it starts
(limits/rates.py). The hold is half a slice, timed from when the claim had those rows
back (LimitPlan.counted_at): the claim's own statements and commit come out of it, and
the other half is left for the answer's trip back from the server. A held job that would
start later (it waited behind a slower one) goes back to ready instead, no attempt
counted, and its start stays counted in the window, on the safe side.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from supervisor.models import JobRow
from supervisor.store.limits.buckets import LimitPlan


class RateHolds:
    """The instants by which the jobs of the batch running now must start."""

    def __init__(self, plan: LimitPlan | None) -> None:
        self.plan = plan if plan is not None and plan.rated else None  # else nothing to watch
        self.counted = 0.0  # monotonic: when the batch's claim counted its starts
        self.start_by: float | None = None  # the earliest held job's; None: nothing to watch

    def claimed(self, batch: Sequence[JobRow]) -> None:
        if self.plan is None:
            return
        self.counted = self.plan.counted_at or time.monotonic()
        self.start_by = self._earliest(batch)

    def late(self, held: Sequence[JobRow], now: float) -> list[JobRow]:
        """The held jobs that may no longer start (none before the earliest start-by)."""
        if self.start_by is None or now <= self.start_by:
            return []
        late = [row for row in held if (by := self._start_by(row)) is not None and now > by]
        gone = {row.id for row in late}
        self.start_by = self._earliest([row for row in held if row.id not in gone])
        return late

    def _start_by(self, row: JobRow) -> float | None:
        hold = self.plan.hold_for(row.handler, row.queue, row.limit_key) if self.plan else None
        return None if hold is None else self.counted + hold

    def _earliest(self, rows: Sequence[JobRow]) -> float | None:
        return min((by for row in rows if (by := self._start_by(row)) is not None), default=None)
