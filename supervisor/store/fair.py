"""Fair share within a queue: the claim of a pool with `fair = true` (SPEC "Fair share
within a queue").

A job's tenant is its group_key, else its limit_key, else '' (the generated column
forkq_jobs.tenant). forkq_tenants holds a row per tenant with ready jobs in a fair queue,
with when a claim last served it: the round-robin cursor. One claim, in one transaction:

1. walks one step through the queue's tenants (one dive in the index forkq_jobs_tenant,
   from where this process's last step ended) and adds the tenant it finds if it has no
   row (last_served 0: served first). So the tenants of raw INSERTs, and tenants whose row
   went, come (back) into the round without anything done at enqueue;
2. locks the rows of the tenants served least recently (SKIP LOCKED: a concurrent claim
   takes the next ones, so one tenant is served by one claim at a time, in its order);
3. reads each one's head job (priority, run_at, id: one dive each) and locks those;
4. sends the served tenants to the back of the round (last_served = now), deletes the
   rows of those found without a ready job, and claims the jobs as the plain claim does.

A claim takes up to `size` jobs, at most one per tenant. When it finds none while every
tenant with work is locked by other claims, it takes the queue's head as the plain claim
does: a worker never idles beside a backlog. What a claim reads is bounded by `size`
(tenant rows, dives), whatever the number of tenants and jobs: no scan of the backlog.

Not under [limits]: a fair pool whose queue a limit covers is a configuration error
(`check_config`, called where the handlers are loaded).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from supervisor.config import Config
from supervisor.errors import ConfigError
from supervisor.models import JobRow
from supervisor.store.base import Store
from supervisor.store.buckets import LimitPlan
from supervisor.store.core import micros
from supervisor.store.jobs import _claimed

SLACK = 4  # tenant rows a claim locks beyond its size (at most double): some may have no job

# Where this process's walk through each queue's tenants is (None: start again at the first).
_walk: dict[str, str | None] = {}


def complete_and_claim(
    store: Store,
    done: Mapping[str, Sequence[int]],
    queue: str,
    owner: str,
    size: int,
    lease: float,
) -> tuple[list[JobRow], int]:
    """Store.complete_and_claim for a fair pool: the head jobs of the tenants served least
    recently, one each, up to `size`; and the previous batch's successes recorded."""
    _discover(store, queue)

    def attempt() -> tuple[list[JobRow], int]:
        with store._tx():
            completed = sum(store._complete(owner, ids, mode) for mode, ids in done.items() if ids)
            rows = _fair_rows(store, queue, size) or store._fetchall(
                "claim_select", store._params(queue=queue, limit=size)
            )
            if rows:
                ids = [row["id"] for row in rows]
                params = store._params(
                    owner=owner, ids=store._ids(ids), first=ids[0], lease_us=micros(lease)
                )
                store._execute("claim_update", params)
        return [_claimed(row, queue, owner) for row in rows], completed

    return store._retrying(attempt)


def _discover(store: Store, queue: str) -> None:
    """One step of this process's walk through the queue's tenants (outside the claim's
    transaction: it waits on no tenant row the claim will lock)."""
    after = _walk.get(queue)
    if after is None:
        rows = store._rows("fair_first_tenant", queue=queue)
    else:
        rows = store._rows("fair_next_tenant", queue=queue, after=after)
    _walk[queue] = rows[0]["tenant"] if rows else None
    if rows and rows[0]["last_served"] is None:
        store._run("fair_add_tenant", queue=queue, tenant=rows[0]["tenant"])


def _fair_rows(store: Store, queue: str, size: int) -> list[dict[str, Any]]:
    """Inside the claim's transaction: the head rows of the tenants next in turn, locked,
    in turn order; the tenants' rows stamped or deleted."""
    turn = [
        r["tenant"]
        for r in store._fetchall(
            "fair_turn", store._params(queue=queue, limit=size + min(size, SLACK))
        )
    ]
    if not turn:
        return []
    heads = {
        r["tenant"]: r["head"]
        for r in store._fetchall("fair_heads", store._params(queue=queue, tenants=json.dumps(turn)))
    }
    empty = [tenant for tenant in turn if heads.get(tenant) is None]
    wanted = [heads[tenant] for tenant in turn if heads.get(tenant) is not None][:size]
    locked: dict[int, dict[str, Any]] = {}
    if wanted:
        params = store._params(ids=store._ids(wanted))
        locked = {int(r["id"]): r for r in store._fetchall("fair_lock", params)}
    rows = [locked[int(head)] for head in wanted if int(head) in locked]
    if empty:
        store._execute("fair_forget", store._params(queue=queue, names=store._ids(empty)))
    if rows:
        served = store._ids(sorted({row["tenant"] for row in rows}))
        store._execute("fair_served", store._params(queue=queue, names=served))
    return rows


def check_config(config: Config, handler_queues: Mapping[str, str]) -> None:
    """Refuse a fair pool whose queue a [limits.NAME] covers (by its queues, or a handler
    registered to it): a fair claim does not keep limits."""
    fair = {pool.name for pool in config.pools if pool.fair}
    if not fair or not config.limits:
        return
    limited = sorted(fair & LimitPlan(config.limits, handler_queues).limited_queues)
    if limited:
        raise ConfigError(
            f"{config.source}: pools.{limited[0]}.fair: a fair pool cannot be under [limits]"
            f" (a limit covers queue {limited[0]!r} or a handler of it): drop fair = true"
            " or the limit"
        )
