"""Jobs held under a rate start within `rate_hold` of their claim, or go back unstarted.

A claim counts every job it takes in its buckets' rate windows at one instant, under the
buckets' locks, the held ones too. The window reaches a slice past the period, so a job
that starts within a slice of that instant is still counted when it starts
(limits/rates.py). Half a slice is left for the claim's own statements and commit after
it counted (a wait for the buckets' locks comes before: it never counts), and the other
half is the hold, from the claim's return: a held job that would start later (it waited
behind a slower one) goes back to ready instead, no attempt counted, and its start stays
counted in the window, on the safe side.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from supervisor.models import JobRow
from supervisor.store.limits.buckets import LimitPlan


class RateHolds:
    """The instants by which the jobs of the batch running now must start."""

    def __init__(self, plan: LimitPlan | None) -> None:
        self.plan = plan
        self.began = 0.0  # monotonic: when the claim came back, committed
        self.start_by: float | None = None  # the earliest held job's; None: nothing to watch

    def claimed(self, batch: Sequence[JobRow]) -> None:
        self.began = time.monotonic()
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
        return None if hold is None else self.began + hold

    def _earliest(self, rows: Sequence[JobRow]) -> float | None:
        if self.plan is None:
            return None
        return min((by for row in rows if (by := self._start_by(row)) is not None), default=None)
