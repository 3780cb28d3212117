"""The bucket rows one claim under [limits] holds (the claim: limits.py): locked in one
order, their rate windows, room and running bound read, and what the claim changed in
them written back.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, cast

from supervisor.config import LimitConfig
from supervisor.store.base import Store
from supervisor.store.limits.buckets import Bucket, LimitPlan, room_in
from supervisor.store.limits.rates import RateWindow, slice_us


class BucketLocks:
    """The buckets' side of one claim: a mixin of `LimitClaim` (claims.py), whose fields
    these are."""

    store: Store
    plan: LimitPlan
    states: dict[Bucket, dict[str, Any]]
    counted: dict[Bucket, int | None]  # running, as counted
    added: Counter[Bucket]  # claimed since that count
    windows: dict[Bucket, RateWindow]
    room: dict[Bucket, int]
    wake: dict[Bucket, float | None]
    started: Counter[Bucket]
    now: float

    def has_parked(self, bucket: Bucket) -> bool:
        wake = self.wake.get(bucket, self.states[bucket]["wake_at"])
        return wake is not None

    @property
    def keeps_bound(self) -> bool:
        """Whether the buckets' rows carry the running bound (MySQL). SQLite counts every
        time instead: reading the running rows costs it less than writing the bucket's
        row at every claim (one more page for every commit to sync)."""
        return self.store.backend == "mysql"

    def bound(self, bucket: Bucket) -> int:
        """The bucket's running jobs, at most: as last counted, and all claimed since
        (some may have ended: that only makes the bound safe)."""
        return (self.counted.get(bucket) or 0) + self.added[bucket]

    def lock(self, buckets: set[Bucket], demand: Counter[Bucket]) -> None:
        """Lock `buckets` (making the rows of new ones) in one order, the primary key's;
        read their windows and room. Running jobs are counted in forkq_jobs only when
        the bound of a bucket with a concurrency could stand in the way of this claim."""
        if not buckets:
            return
        ordered = sorted(buckets)
        rows = self.fetch_locked(ordered)
        # Every batch with a rated job locked its bucket in the transaction that took it,
        # this claim's last one (a retry's, a fair claim's later round): so this is fresh.
        self.plan.counted_at = time.monotonic()
        missing = [b for b in ordered if b not in rows]
        if missing:
            pairs = json.dumps([b.pair() for b in missing])
            self.store.statement("limit_insert", self.store.bind(buckets=pairs))
            rows.update(self.fetch_locked(missing))
        self.states.update(rows)
        self.now = self.now or max(float(row["now"]) for row in rows.values())  # all locked
        recount = False
        # SQLite reads every running job's count with the lock (one claim at a time there):
        # an upper bound of each bucket's, good enough while it leaves room for the claim.
        running_all = next(iter(rows.values()))["running_all"]
        for bucket in ordered:
            state, limit = self.states[bucket], self.plan.limits.get(bucket.name)
            counted = state["running_counted"]
            self.counted[bucket] = None if counted is None else int(counted)
            self.added[bucket] = int(state["running_added"] or 0)
            if not self.keeps_bound:
                self.counted[bucket], self.added[bucket] = int(running_all or 0), 0
            window = rate_window(limit, state, self.now)
            if window is not None:
                self.windows[bucket] = window
            if limit is not None and limit.concurrency is not None:
                recount = recount or (
                    (counted is None and self.keeps_bound)
                    or self.has_parked(bucket)
                    or self.bound(bucket) + demand[bucket] > limit.concurrency
                )
        if recount:  # exact counts, from forkq_jobs itself, for every bucket held
            usage = self.store.query("limit_usage", self.store.bind())
            exact = self.plan.running(usage, self.states)
            for bucket in self.states:
                self.counted[bucket], self.added[bucket] = exact[bucket], 0
        for bucket in ordered:
            limit = self.plan.limits.get(bucket.name)
            self.room[bucket] = room_in(limit, self.bound(bucket), self.windows.get(bucket))

    def fetch_locked(self, buckets: Sequence[Bucket]) -> dict[Bucket, dict[str, Any]]:
        if len(buckets) == 1:
            [one] = buckets
            params = self.store.bind(name=one.name, key=one.key)
            rows = self.store.query("limit_lock_one", params)
        else:
            pairs = self.store.bind_ids(cast(Any, [b.pair() for b in buckets]))
            rows = self.store.query("limit_lock", self.store.bind(buckets=pairs))
        return {Bucket(r["name"], r["limit_key"]): r for r in rows}

    def changed(self) -> list[list[Any]]:
        """The held buckets whose state this claim changed, as limit_save rows."""
        states = []
        for bucket, state in sorted(self.states.items()):
            window = self.windows.get(bucket)
            wake = self.wake.get(bucket, state["wake_at"])
            counted, added = self.counted.get(bucket), self.added[bucket]
            if not self.keeps_bound:
                counted, added = state["running_counted"], int(state["running_added"] or 0)
            if (
                wake == state["wake_at"]
                and counted == state["running_counted"]
                and added == int(state["running_added"] or 0)
                and not (window is not None and self.started[bucket])
            ):
                continue
            stored = (state["rate_slice_us"], state["rate_base"], state["rate_counts"])
            rate = window.dump() if window is not None else stored
            states.append([bucket.name, bucket.key, *rate, wake, counted, added])
        return states


def rate_window(
    limit: LimitConfig | None, state: Mapping[str, Any], now: float
) -> RateWindow | None:
    length = None if limit is None else slice_us(limit)
    if length is None:
        return None
    stored = (state["rate_slice_us"], state["rate_base"], state["rate_counts"])
    return RateWindow.load(length, stored, now)
