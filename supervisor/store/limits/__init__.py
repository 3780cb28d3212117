"""Flow control: which jobs a claim may take, beyond priority and FIFO order.

- claims.py: `[limits]`, concurrency and rate per named limit across every host. The
  pure decisions are buckets.py's (a rate's window rates.py's), the bucket rows a claim
  locks locks.py's, and the chores' pass over parked jobs and `forkq status`'s figures
  upkeep.py's.
- fair.py: fair share within a queue, tenants taking turns (`[pools.X] fair = true`).

`claim` is the one entry a worker calls. These modules write the jobs table through the
store's public seam (`transaction`, `statement`, `query`, ...: store/core.py), never
through its private plumbing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from supervisor.models import JobRow
from supervisor.store.base import Store
from supervisor.store.limits import claims, fair
from supervisor.store.limits.buckets import LimitPlan


def claim(
    store: Store,
    done: Mapping[str, Sequence[int]],
    queue: str,
    owner: str,
    size: int,
    lease: float,
    *,
    limits: LimitPlan | None,
    fair_share: bool,
    weights: Sequence[tuple[str, int]] = (),
) -> tuple[list[JobRow], int]:
    """Write the successes `done` and claim up to `size` jobs of `queue`, in one
    transaction: fairly (tenants take turns, within the `limits` plan), under the
    `limits` plan, or in plain priority / run_at / id order. A fair pool's tenants of
    `weights` keep their turn for that many claims. The jobs claimed and how
    many successes were written."""
    if fair_share:
        return fair.complete_and_claim(
            store, done, queue, owner, size, lease, limits, dict(weights)
        )
    if limits:
        return claims.complete_and_claim(store, limits, done, queue, owner, size, lease)
    return store.complete_and_claim(done, queue, owner, size, lease)
