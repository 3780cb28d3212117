"""Claims under `[limits]`: no limit is exceeded across hosts, and jobs waiting on a full
bucket cost a claim nothing (SPEC "Flow control (cluster-wide)").

A claim of a queue some limit covers, in one transaction:

1. selects its batch from `forkq_jobs_limit` (ready jobs by limit_wait, queue, priority
   DESC, run_at, id: a partial index on SQLite, the virtual column ready_wait on MariaDB):
   the usual order, without the parked jobs (limit_wait <> ''), under
   `FOR UPDATE SKIP LOCKED`;
2. locks the rows of the batch's buckets in forkq_limits, in one global order (name, key),
   with a plain `FOR UPDATE`. A claim holds them only for the statements below, and waits
   for nothing else while it holds them (job rows are taken with SKIP LOCKED), so two
   claims never wait on each other in a cycle and a wait lasts one short critical section.
   SQLite's BEGIN IMMEDIATE already makes one claim at a time;
3. counts the buckets' running jobs in forkq_jobs itself (status running or cancelling:
   a job that left `running` in any way no longer counts, so no slot can leak) and reads
   their rate windows, now that nobody else can change either;
4. runs each job, in order, while all its buckets have room, and parks the others: they
   stay `ready` with no attempt counted, limit_wait naming the bucket, out of every
   claim's range. A job behind one parked on its bucket waits behind it, in order;
5. hands room left in a bucket with parked jobs to the first of them (unparks them in
   claim order), so the next claim takes them; and writes the buckets' rate windows and
   when to look at their parked jobs again (wake_at).

A queue no limit covers is claimed as without limits: the same two statements, no more.
A worker also looks, every LOOK_EVERY seconds, at buckets whose wake_at has come (a rate
window that frees a slot, a slot freed by a job the master settled or a lease reaped)
and unparks what fits. The pure decisions are in buckets.py; the bucket rows a claim
locks, in limits/locks.py; the chores' pass and `forkq status`, in limits/upkeep.py.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from supervisor.columns import whole
from supervisor.config import Config
from supervisor.models import JobRow, JobState
from supervisor.store.base import Store
from supervisor.store.core import micros
from supervisor.store.jobs import claimed_job
from supervisor.store.limits.buckets import (
    Bucket,
    Candidate,
    LimitPlan,
    bucket_key_ok,
    decide,
    wake_at,
)
from supervisor.store.limits.locks import BucketLocks
from supervisor.store.limits.rates import RateWindow

LOOK_EVERY = 0.1  # seconds between one worker's looks at buckets whose wake_at has come
LOOK_BUCKETS = 8  # due buckets one look takes on
UNPARK_MOST = 500  # jobs unparked per bucket per claim when a bucket's limit is gone
PARK_PAGE = 200  # rows a claim reads per page while it parks a blocked backlog
MORE_PAGES = 4  # pages after the first one claim may read: its cost stays bounded
REFUSED_KEY = (
    "limit_key holds a NUL character, which no bucket can hold (enqueue refuses one):"
    " ended dead so the other keys run"
)


def complete_and_claim(
    store: Store,
    plan: LimitPlan,
    done: Mapping[str, Sequence[int]],
    queue: str,
    owner: str,
    limit: int,
    lease: float,
) -> tuple[list[JobRow], int]:
    """Store.complete_and_claim with the limits of `plan` kept (see the module's doc)."""
    limited = queue in plan.limited_queues
    due = look(store, plan) if limited else []
    freed, plan.freed = plan.freed, Counter()

    def attempt() -> tuple[list[JobRow], int]:
        with store.transaction():
            completed = sum(
                store.complete_in_transaction(owner, ids, mode) for mode, ids in done.items() if ids
            )
            claim = LimitClaim(store, plan, queue, owner, lease)
            return claim.run(limit, limited, due, freed), completed

    return store.retrying(attempt)


def look(store: Store, plan: LimitPlan) -> list[Bucket]:
    """Before a claim of a limited queue: the buckets whose wake_at has come, every
    LOOK_EVERY seconds of this worker (none in between)."""
    store.require_limits_schema()
    now = time.monotonic()
    if now < plan.next_look:
        return []
    plan.next_look = now + LOOK_EVERY
    return [Bucket(r["name"], r["limit_key"]) for r in store.rows("limit_due", limit=LOOK_BUCKETS)]


@dataclass
class _Step:
    """What one select of a claim came to."""

    jobs: list[JobRow]
    rows: list[dict[str, Any]]  # the rows of those jobs, to claim
    unparked: int = 0  # jobs this step made claimable (handed a bucket's room on)
    undecided: int = 0  # rows left as they were (another bucket's, or past the batch)
    full: bool = False  # every row was parked: a blocked backlog ahead


@dataclass
class LimitClaim(BucketLocks):
    """One claim transaction under limits."""

    store: Store
    plan: LimitPlan
    queue: str
    owner: str
    lease: float
    states: dict[Bucket, dict[str, Any]] = field(default_factory=dict)
    counted: dict[Bucket, int | None] = field(default_factory=dict)  # running, as counted
    added: Counter[Bucket] = field(default_factory=Counter)  # claimed since that count
    windows: dict[Bucket, RateWindow] = field(default_factory=dict)
    room: dict[Bucket, int] = field(default_factory=dict)
    wake: dict[Bucket, float | None] = field(default_factory=dict)
    started: Counter[Bucket] = field(default_factory=Counter)
    now: float = 0.0
    first_id: int = 0  # the job the claim starts at once (first_job)

    def run(
        self, limit: int, limited: bool, due: Sequence[Bucket], freed: Counter[Bucket]
    ) -> list[JobRow]:
        if not limited:
            rows = self.select("claim_select", limit)
            if not any(self.plan.covers(r["handler"], self.queue) for r in rows):
                self.take(rows, final=True)
                return [claimed_job(r, self.queue, self.owner) for r in rows]
            # A job of a limited handler in a queue no limit names: from now on this
            # queue is claimed under limits (the rows this select locked are ours still).
            self.store.require_limits_schema()
            self.plan.limited_queues.add(self.queue)
        rows = self.select("claim_select_limited", limit)
        if not due and self.reserved(rows, freed):
            return [claimed_job(r, self.queue, self.owner) for r in rows]
        step = self.decide(rows, set(due) | set(freed), limit, first=True)
        step.full = step.full and len(rows) >= limit
        claimed = list(step.jobs)
        for _ in range(MORE_PAGES):
            # Another page while this claim has room for jobs and either its unparking
            # made jobs claimable, or a whole page was parked (a blocked bucket's backlog
            # ahead: parked a page at a time, each claim costs at most MORE_PAGES pages).
            # Only in the buckets it holds: a second lock round could break their order.
            if len(claimed) >= limit or step.undecided or not (step.unparked or step.full):
                break
            self.take(step.rows, final=False)  # out of the next page's way
            size = limit - len(claimed) if step.unparked else PARK_PAGE
            rows = self.select("claim_select_limited", size)
            step = self.decide(rows, set(), limit - len(claimed), first=False, claimed=len(claimed))
            step.full = step.full and len(rows) >= size
            claimed += step.jobs
        self.take(step.rows, final=True)
        return claimed

    def reserved(self, rows: Sequence[dict[str, Any]], freed: Counter[Bucket]) -> bool:
        """The short way, on MySQL: every row in one bucket of a limit with a concurrency
        and no rate, whose bound leaves room for all of them and with nothing parked,
        claimed in one statement that checks that under the bucket's lock. False, with
        nothing changed, when it does not apply or its guard fails."""
        if self.store.backend != "mysql" or not rows:
            return False
        found = {self.plan.buckets_for(r["handler"], self.queue, r["limit_key"]) for r in rows}
        if len(found) != 1:
            return False
        [buckets] = found
        if len(buckets) != 1 or set(freed) - set(buckets):  # a slot freed elsewhere
            return False
        [bucket] = buckets
        limit = self.plan.limits[bucket.name]
        if limit.concurrency is None or limit.rate is not None:
            return False
        params = self.store.bind(
            owner=self.owner,
            ids=self.store.bind_ids([r["id"] for r in rows]),
            first=self.first_job(rows),
            lease_us=micros(self.lease),
            name=bucket.name,
            key=bucket.key,
            count=len(rows),
            # Jobs behind the first wait holding slots: the bucket keeps as many free
            # (buckets.decide's rule, for one bucket).
            needed=1 if len(rows) == 1 else 2 * len(rows),
            concurrency=limit.concurrency,
        )
        return self.store.statement("claim_update_reserve", params) > 0

    def select(self, query: str, limit: int) -> list[dict[str, Any]]:
        """The claim's rows; under limits, without those no bucket can hold (ended dead)."""
        params = self.store.bind(queue=self.queue, limit=max(1, limit))
        rows = self.store.query(query, params)
        return self.refuse(rows) if query == "claim_select_limited" else rows

    def refuse(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`rows` without those no bucket can hold, which end dead (limit_refuse)."""
        refused = [int(r["id"]) for r in rows if not bucket_key_ok(r["limit_key"])]
        if not refused:
            return rows
        params = self.store.bind(ids=self.store.bind_ids(refused), error=REFUSED_KEY)
        self.store.statement("limit_refuse", params)
        if self.store.has_deps_schema():  # jobs waiting on them are settled in this claim
            self.store.settle_children(refused, ended=JobState.DEAD)
            self.store.forget_parents(refused)  # their own rows go as they end, as any end
        return [r for r in rows if int(r["id"]) not in refused]

    def take(self, rows: Sequence[dict[str, Any]], *, final: bool) -> None:
        """Claim `rows`; with `final`, write the buckets' new state too: on MySQL in the
        same statement (a multi-table UPDATE), on SQLite (one table a statement) after it."""
        states = self.changed() if final else []
        params = self.store.bind(
            owner=self.owner,
            ids=self.store.bind_ids([r["id"] for r in rows]),
            first=self.first_job(rows),  # the claim's first job starts now, the rest wait
            lease_us=micros(self.lease),
            started=self.now,
            states=json.dumps(states),
        )
        if rows and not self.now:
            self.store.statement("claim_update", params)  # no bucket locked: none is covered
        elif rows and states and self.store.backend == "mysql":
            self.store.statement("claim_update_limited", params)
            return
        elif rows:
            self.store.statement("claim_update_at", params)
        if states:
            self.store.statement("limit_save", params)

    def first_job(self, rows: Sequence[dict[str, Any]]) -> int:
        """The id of the claim's first job (its first select's first row taken): the one
        that starts at once; the others are claimed, not started (started_at NULL)."""
        if not self.first_id and rows:
            self.first_id = int(rows[0]["id"])
        return self.first_id

    # --- the decision ------------------------------------------------------------------------

    def decide(
        self,
        rows: Sequence[dict[str, Any]],
        extra: set[Bucket],
        most: int,
        *,
        first: bool,
        claimed: int = 0,
    ) -> _Step:
        """Run (at most `most`), park and unpark for one select. Only the first select
        locks buckets: rows of others are left as they are (undecided)."""
        candidates = [
            Candidate(
                int(r["id"]),
                self.plan.buckets_for(r["handler"], self.queue, r["limit_key"]),
                (-whole(r, "priority", 0, []), float(r["run_at_s"]), int(r["id"])),
            )
            for r in rows
        ]
        if first:
            demand = Counter(b for c in candidates for b in c.buckets)
            self.lock(set(demand) | extra, demand)
        held = set(self.states)
        # Rows of buckets this claim could not lock (a later select's) wait, untouched.
        undecided = sum(1 for c in candidates if not set(c.buckets) <= held)
        candidates = [c for c in candidates if set(c.buckets) <= held]
        heads = self.heads({b for c in candidates for b in c.buckets if self.has_parked(b)})
        decision = decide(candidates, self.room_left(), heads, most, self.started, claimed)
        for bucket, ids in sorted(decision.park.items()):
            self.store.statement(
                "limit_park", self.store.bind(bucket=bucket.id, ids=self.store.bind_ids(ids))
            )
            self.wake[bucket] = self.now  # it has parked jobs now: hand_on says when to look
        self.count_starts(decision.started)
        unparked = sum(self.hand_on(b) for b in sorted(held))
        ran = set(decision.run)
        taken = [r for r in rows if int(r["id"]) in ran]
        jobs = [claimed_job(r, self.queue, self.owner) for r in taken]
        parked = sum(len(ids) for ids in decision.park.values())
        return _Step(
            jobs,
            taken,
            unparked=unparked,
            undecided=undecided + len(decision.skipped),
            full=bool(rows) and parked == len(rows),
        )

    def count_starts(self, started: Counter[Bucket]) -> None:
        """The jobs this claim starts, counted in their buckets' bounds and rate windows."""
        self.started.update(started)
        for bucket, count in started.items():
            self.added[bucket] += count
            if bucket in self.windows:
                self.windows[bucket].record(count)

    def room_left(self) -> dict[Bucket, int]:
        return {b: self.room[b] - self.started[b] for b in self.states}

    def heads(self, buckets: set[Bucket]) -> dict[Bucket, tuple[int, float, int]]:
        """The first job parked on each of `buckets` in this queue, as a claim position."""
        if not buckets:
            return {}
        params = self.store.bind(
            queue=self.queue, buckets=json.dumps(sorted(b.id for b in buckets))
        )
        found = {}
        for row in self.store.query("limit_heads", params):
            if row["head"] is not None:
                head = json.loads(row["head"]) if isinstance(row["head"], str) else row["head"]
                found[Bucket.parse(row["bucket"])] = (
                    int(head[0]),
                    int(head[1]) / 1e6,
                    int(head[2]),
                )
        return found

    def hand_on(self, bucket: Bucket) -> int:
        """Unpark, in order, as many of the bucket's parked jobs as it has room for (this
        queue's first); set when to look at it again. How many were unparked."""
        if not self.has_parked(bucket):
            return 0
        limit = self.plan.limits.get(bucket.name)
        left = self.room[bucket] - self.started[bucket]
        ids: list[int] = []
        if left > 0:
            most = min(left, UNPARK_MOST)
            for query in ("unpark_select_queue", "unpark_select"):  # this queue's first
                params = self.store.bind(bucket=bucket.id, queue=self.queue, limit=most - len(ids))
                found = [int(r["id"]) for r in self.store.query(query, params)]
                if found:
                    params = self.store.bind(ids=self.store.bind_ids(found))
                    self.store.statement("unpark_update", params)
                    ids += found
                if len(ids) >= most:
                    break
            if len(ids) < most:
                self.wake[bucket] = None  # none left (or locked: the chores look again)
                return len(ids)
        running = self.bound(bucket) + len(ids)
        self.wake[bucket] = wake_at(limit, running, self.windows.get(bucket), self.now)
        return len(ids)


def plan_for(config: Config, handler_queues: Mapping[str, str]) -> LimitPlan | None:
    """The worker's plan, or None when the config has no limits (claims as ever)."""
    return LimitPlan(config.limits, handler_queues) if config.limits else None
