"""Fair share within a queue: the claim of a pool with `fair = true` (SPEC "Fair share
within a queue").

A job's tenant is its group_key, else its limit_key, else '' (the generated column
forkq_jobs.tenant). forkq_tenants holds a row per tenant with jobs in a fair queue, with
when a claim last served it: the round-robin cursor. A tenant joins the round when a
producer enqueues a job with a group_key (join_round, with the job); the claims find the
others (raw INSERTs, jobs with only a limit_key, tenants whose row went): every
WALK_EVERY-th claim of a process takes one step of a walk through the queue's tenants
(one dive in the index forkq_jobs_tenant) and looks at the tenant of the latest ready job,
adding a row for either if it has none (last_served 0: served first). Then the claim, in
one transaction:

1. locks the rows of the tenants served least recently (SKIP LOCKED: a concurrent claim
   takes the next ones, so one tenant is served by one claim at a time, in its order),
   with each one's head job (priority, run_at, id: one dive each), and locks those jobs;
2. deletes the rows of the tenants found without a ready or running job (those with one
   running go to the back of the round: a job handed back finds its tenant there);
3. claims the jobs as the plain claim does and sends their tenants to the back of the
   round (last_served = now).

A claim takes up to `size` jobs, at most one per tenant, from the next size + EXTRA
tenants (size + SLACK under limits). When it finds none while every
tenant with work is locked by other claims, it takes the queue's head as the plain claim
does: a worker never idles beside a backlog. What a claim reads is bounded by `size`
(tenant rows, dives), whatever the number of tenants and jobs: no scan of the backlog.

Under [limits] (a limit covers the queue, a handler registered to it, or a head job's
handler), the claim is the fair pick kept to the limits (claim_limited): the heads of the
next tenants (size + SLACK of them) are the candidates; their buckets are locked in the
one order claims.py locks them in (after the tenant and job rows, which are taken with
SKIP LOCKED: no claim waits while it holds a bucket); each head runs, in turn order,
while its buckets have room. A tenant whose head does not fit is passed over and goes to
the back of the round: a full bucket never blocks the round. Nothing is parked (a head
stays the tenant's head, in order), and such a claim never takes the plain fallback
(whose select could pass a tenant's locked head): with nothing taken after passing
tenants over, it tries the next ones, up to ROUNDS transactions. Limited queues claim
one job at a time (Worker.claim_size): never more held than can start. A plain fallback
that finds a limited handler's job takes nothing, and the queue is claimed under limits
from then on.

Weights (`[pools.X.weights]`, schema 15): a served tenant of weight N keeps its turn
(last_served unchanged, forkq_tenants.served counting) until it has had N claims in it,
then goes to the back (fair_weigh); a tenant passed over loses the rest of its turn. A
pool without weights never reads or writes `served`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from supervisor.config import Config
from supervisor.models import JobRow
from supervisor.store.base import Store
from supervisor.store.core import micros
from supervisor.store.jobs import claimed_job
from supervisor.store.limits.buckets import Bucket, Candidate, LimitPlan, decide
from supervisor.store.limits.claims import LimitClaim, look

SLACK = 4  # tenant rows a claim under limits locks beyond its size: some heads may not fit

# Without limits, one row beyond the size: a tenant found without a job is rare (its row
# goes when a claim finds it so), and each row costs a claim a locked row and index dives
# (benchmarks, section fair, MariaDB: fair against plain 0.80x with 24 rows for a claim of
# 20, 1.03x with 21). A claim that finds no head at all takes the queue's head (attempt).
EXTRA = 1

ROUNDS = 3  # transactions a claim under limits may try while it passes full tenants over

WALK_EVERY = 4  # claims per step of the walk (producers' jobs with a group_key join at once)

# Where this process's walk through each queue's tenants is (None: start again at the first),
# and how many claims it made there.
_walk: dict[str, str | None] = {}
_steps: dict[str, int] = {}


def complete_and_claim(
    store: Store,
    done: Mapping[str, Sequence[int]],
    queue: str,
    owner: str,
    size: int,
    lease: float,
    plan: LimitPlan | None = None,
    weights: Mapping[str, int] | None = None,
) -> tuple[list[JobRow], int]:
    """Store.complete_and_claim for a fair pool: the head jobs of the tenants served least
    recently, one each, up to `size`, within the limits of `plan`; and the previous
    batch's successes recorded. A tenant of `weights` keeps its turn for that many claims."""
    _steps[queue] = step = _steps.get(queue, 0) + 1
    if step % WALK_EVERY == 1:
        _discover(store, queue)
    due = look(store, plan) if plan and queue in plan.limited_queues else []
    freed: Counter[Bucket] = Counter()
    if plan:
        freed, plan.freed = plan.freed, Counter()
    turn = _Turn(store, queue, owner, size, lease, plan, weights or {})
    completed = 0
    for _ in range(ROUNDS):
        rows, passed, written = store.retrying(partial(turn.attempt, done, [*due, *freed]))
        done, due, freed, completed = {}, [], Counter(), completed + written
        if rows or not passed:
            break
    return [claimed_job(row, queue, owner) for row in rows], completed


@dataclass
class _Turn:
    """One fair claim: up to ROUNDS transactions under limits, one without."""

    store: Store
    queue: str
    owner: str
    size: int
    lease: float
    plan: LimitPlan | None
    weights: Mapping[str, int]  # the pool's: tenant to claims per turn (others: 1)

    def attempt(
        self, done: Mapping[str, Sequence[int]], extra: list[Bucket]
    ) -> tuple[list[dict[str, Any]], int, int]:
        """One claim transaction: the rows claimed, how many tenants were passed over
        (their bucket full) and how many successes were written."""
        store, queue, size, plan = self.store, self.queue, self.size, self.plan
        with store.transaction():
            completed = sum(
                store.complete_in_transaction(self.owner, ids, mode)
                for mode, ids in done.items()
                if ids
            )
            limited = plan is not None and queue in plan.limited_queues
            rows = _fair_rows(store, queue, size + (SLACK if limited else EXTRA))
            if plan and (limited or any(plan.covers(r["handler"], queue) for r in rows)):
                store.require_limits_schema()
                plan.limited_queues.add(queue)  # a limited handler's job here: from now on
                claim = LimitClaim(store, plan, queue, self.owner, self.lease)
                taken, passed = claim_limited(claim, rows, size, extra)
                self.turned([r["tenant"] for r in taken], [r["tenant"] for r in passed])
                return taken, len(passed), completed
            rows = rows[:size]
            if rows:
                _take(store, rows, self.owner, self.lease)
                self.turned([r["tenant"] for r in rows], [])
            else:  # every tenant with work is another claim's now: the queue's head
                rows = store.query("claim_select", store.bind(queue=queue, limit=size))
                if plan and any(plan.covers(r["handler"], queue) for r in rows):
                    plan.limited_queues.add(queue)  # a limited handler's job: none taken
                    return [], 0, completed
                _take(store, rows, self.owner, self.lease)
        return rows, 0, completed

    def turned(self, served: list[str], passed: list[str]) -> None:
        """Tenants to the back of the round: those passed over at once, those served once
        they have had their weight's claims in this turn (one without weights)."""
        groups: dict[int, set[str]] = {1: set(passed)}
        for tenant in served:
            groups.setdefault(self.weights.get(tenant, 1), set()).add(tenant)
        for weight, tenants in sorted(groups.items()):
            if not tenants:
                continue
            names = self.store.bind_ids(sorted(tenants))
            if self.weights:
                params = self.store.bind(queue=self.queue, names=names, weight=weight)
                self.store.statement("fair_weigh", params)
            else:
                self.store.statement("fair_served", self.store.bind(queue=self.queue, names=names))


def claim_limited(
    claim: LimitClaim, rows: list[dict[str, Any]], size: int, extra: list[Bucket]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The fair pick under limits, in the claim's transaction: the head `rows` (in turn
    order) run while their buckets have room, up to `size`; those that do not fit are
    passed over (not parked). The buckets of `extra` (due, or slots this worker freed)
    are locked with theirs and their room handed on. The rows claimed, and those passed."""
    rows = claim.refuse(rows)
    candidates = [
        Candidate(int(r["id"]), claim.plan.buckets_for(r["handler"], claim.queue, r["limit_key"]))
        for r in rows
    ]
    demand = Counter(b for c in candidates for b in c.buckets)
    claim.lock(set(demand) | set(extra), demand)
    decision = decide(candidates, claim.room_left(), None, size)
    claim.count_starts(decision.started)
    for bucket in sorted(claim.states):
        claim.hand_on(bucket)
    ran = set(decision.run)
    passed = {job for ids in decision.park.values() for job in ids}
    taken = [r for r in rows if int(r["id"]) in ran]
    claim.take(taken, final=True)
    return taken, [r for r in rows if int(r["id"]) in passed]


def _discover(store: Store, queue: str) -> None:
    """One step of this process's walk through the queue's tenants, and a look at the
    tenant of the latest ready job (a newcomer, most often); a tenant without a row gets
    one. Outside the claim's transaction: it waits on no row the claim locks."""
    after = _walk.get(queue)
    if after is None:
        rows = store.rows("fair_first_tenant", queue=queue)
    else:
        rows = store.rows("fair_next_tenant", queue=queue, after=after)
    # With no tenant after `after`, the walk starts again at the first.
    _walk[queue] = next((row["tenant"] for row in rows if row["walk"]), None)
    for tenant in {row["tenant"] for row in rows if row["last_served"] is None}:
        store.run("fair_add_tenant", queue=queue, tenant=tenant)


def _fair_rows(store: Store, queue: str, limit: int) -> list[dict[str, Any]]:
    """Inside the claim's transaction: the head rows of the next `limit` tenants in turn,
    locked, in turn order; the rows of tenants found without a ready job deleted or
    skipped."""
    turn = store.query("fair_turn", store.bind(queue=queue, limit=limit))
    empty = [r["tenant"] for r in turn if r["id"] is None and r["any_ready"] is None]
    if empty:  # rows go, or to the back of the round while the tenant has jobs running
        # Which have one running: a plain read, apart from the DELETE, so that it locks
        # none of the queue's running jobs (fair_busy in mysql.sql).
        params = store.bind(queue=queue, names=store.bind_ids(empty))
        busy = {row["tenant"] for row in store.query("fair_busy", params)}
        idle = [tenant for tenant in empty if tenant not in busy]
        if idle:
            store.statement("fair_forget", store.bind(queue=queue, names=store.bind_ids(idle)))
        if busy:
            names = store.bind_ids(sorted(busy))
            store.statement("fair_skip", store.bind(queue=queue, names=names))
    return [row for row in turn if row["id"] is not None]


def _take(store: Store, rows: list[dict[str, Any]], owner: str, lease: float) -> None:
    """Claim the rows (the first starts now). After a fair pick, Turn.turned sends their
    tenants to the back of the round in a statement of its own (fair_served)."""
    if rows:
        ids = [row["id"] for row in rows]
        params = store.bind(
            owner=owner, ids=store.bind_ids(ids), first=ids[0], lease_us=micros(lease)
        )
        store.statement("claim_update", params)


def prune_rounds(store: Store, config: Config) -> int:
    """The chores: delete the round rows of queues no pool of `config` makes fair (jobs with
    a group_key enqueued to a plain queue join a round nobody serves); how many went."""
    fair = ["", *(pool.name for pool in config.pools if pool.fair)]  # "": never a queue
    return store.in_chunks("fair_prune", queues=store.bind_ids(fair))
