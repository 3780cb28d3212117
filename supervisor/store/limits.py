"""Claims under `[limits]`: no limit is exceeded across hosts, and jobs waiting on a full
bucket cost a claim nothing (SPEC "Flow control (cluster-wide)").

A claim of a queue some limit covers, in one transaction:

1. selects its batch from `forkq_jobs_limit` (status, limit_wait, queue, priority DESC,
   run_at, id): the usual order, without the parked jobs (limit_wait <> ''), under
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
and unparks what fits. The pure decisions are in buckets.py.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from supervisor.config import Config, LimitConfig
from supervisor.models import JobRow
from supervisor.store.base import Store
from supervisor.store.buckets import (
    Bucket,
    Candidate,
    LimitPlan,
    RateWindow,
    decide,
    room_in,
    slice_us,
    wake_at,
)
from supervisor.store.core import PURGE_CHUNK, micros
from supervisor.store.jobs import _claimed

LOOK_EVERY = 0.1  # seconds between one worker's looks at buckets whose wake_at has come
LOOK_BUCKETS = 8  # due buckets one look takes on
UNPARK_MOST = 500  # jobs unparked per bucket per claim when a bucket's limit is gone
LOOK_PARKED = 200  # buckets with parked jobs the chores look at per tick
PARK_PAGE = 200  # rows a claim reads per page while it parks a blocked backlog
MORE_PAGES = 4  # pages after the first one claim may read: its cost stays bounded


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
    due: list[Bucket] = []
    if limited:
        store.require_limits_schema()
        now = time.monotonic()
        if now >= plan.next_look:
            plan.next_look = now + LOOK_EVERY
            due = [
                Bucket(r["name"], r["limit_key"])
                for r in store._rows("limit_due", limit=LOOK_BUCKETS)
            ]
    freed, plan.freed = plan.freed, Counter()

    def attempt() -> tuple[list[JobRow], int]:
        with store._tx():
            completed = sum(store._complete(owner, ids, mode) for mode, ids in done.items() if ids)
            claim = _Claim(store, plan, queue, owner, lease)
            return claim.run(limit, limited, due, freed), completed

    return store._retrying(attempt)


@dataclass
class _Step:
    """What one select of a claim came to."""

    jobs: list[JobRow]
    rows: list[dict[str, Any]]  # the rows of those jobs, to claim
    unparked: int = 0  # jobs this step made claimable (handed a bucket's room on)
    undecided: int = 0  # rows left as they were (another bucket's, or past the batch)
    full: bool = False  # every row was parked: a blocked backlog ahead


@dataclass
class _Claim:
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

    def run(
        self, limit: int, limited: bool, due: Sequence[Bucket], freed: Counter[Bucket]
    ) -> list[JobRow]:
        if not limited:
            rows = self.select("claim_select", limit)
            if not any(self.plan.covers(r["handler"], self.queue) for r in rows):
                self.take(rows, final=True)
                return [_claimed(r, self.queue, self.owner) for r in rows]
            # A job of a limited handler in a queue no limit names: from now on this
            # queue is claimed under limits (the rows this select locked are ours still).
            self.store.require_limits_schema()
            self.plan.limited_queues.add(self.queue)
        rows = self.select("claim_select_limited", limit)
        if not due and self.reserved(rows, freed):
            return [_claimed(r, self.queue, self.owner) for r in rows]
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
            step = self.decide(rows, set(), limit - len(claimed), first=False)
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
        params = self.store._params(
            owner=self.owner,
            ids=self.store._ids([r["id"] for r in rows]),
            lease_us=micros(self.lease),
            name=bucket.name,
            key=bucket.key,
            count=len(rows),
            concurrency=limit.concurrency,
        )
        return self.store._execute("claim_update_reserve", params) > 0

    def select(self, query: str, limit: int) -> list[dict[str, Any]]:
        params = self.store._params(queue=self.queue, limit=max(1, limit))
        return self.store._fetchall(query, params)

    def take(self, rows: Sequence[dict[str, Any]], *, final: bool) -> None:
        """Claim `rows`; with `final`, write the buckets' new state too: on MySQL in the
        same statement (a multi-table UPDATE), on SQLite (one table a statement) after it."""
        states = self.changed() if final else []
        params = self.store._params(
            owner=self.owner,
            ids=self.store._ids([r["id"] for r in rows]),
            lease_us=micros(self.lease),
            started=self.now,
            states=json.dumps(states),
        )
        if rows and not self.now:
            self.store._execute("claim_update", params)  # no bucket locked: none is covered
        elif rows and states and self.store.backend == "mysql":
            self.store._execute("claim_update_limited", params)
            return
        elif rows:
            self.store._execute("claim_update_at", params)
        if states:
            self.store._execute("limit_save", params)

    # --- the decision ------------------------------------------------------------------------

    def decide(
        self, rows: Sequence[dict[str, Any]], extra: set[Bucket], most: int, *, first: bool
    ) -> _Step:
        """Run (at most `most`), park and unpark for one select. Only the first select
        locks buckets: rows of others are left as they are (undecided)."""
        candidates = [
            Candidate(
                int(r["id"]),
                self.plan.buckets_for(r["handler"], self.queue, r["limit_key"]),
                (-int(r["priority"]), float(r["run_at_s"]), int(r["id"])),
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
        decision = decide(candidates, self.room_left(), heads, most)
        for bucket, ids in sorted(decision.park.items()):
            self.store._execute(
                "limit_park", self.store._params(bucket=bucket.id, ids=self.store._ids(ids))
            )
            self.wake[bucket] = self.now  # it has parked jobs now: hand_on says when to look
        self.started.update(decision.started)
        for bucket, count in decision.started.items():
            self.added[bucket] += count
            if bucket in self.windows:
                self.windows[bucket].record(count)
        unparked = sum(self.hand_on(b) for b in sorted(held))
        ran = set(decision.run)
        taken = [r for r in rows if int(r["id"]) in ran]
        jobs = [_claimed(r, self.queue, self.owner) for r in taken]
        parked = sum(len(ids) for ids in decision.park.values())
        return _Step(
            jobs,
            taken,
            unparked=unparked,
            undecided=undecided + len(decision.skipped),
            full=bool(rows) and parked == len(rows),
        )

    def room_left(self) -> dict[Bucket, int]:
        return {b: self.room[b] - self.started[b] for b in self.states}

    def has_parked(self, bucket: Bucket) -> bool:
        wake = self.wake.get(bucket, self.states[bucket]["wake_at"])
        return wake is not None

    def heads(self, buckets: set[Bucket]) -> dict[Bucket, tuple[int, float, int]]:
        """The first job parked on each of `buckets` in this queue, as a claim position."""
        if not buckets:
            return {}
        params = self.store._params(
            queue=self.queue, buckets=json.dumps(sorted(b.id for b in buckets))
        )
        found = {}
        for row in self.store._fetchall("limit_heads", params):
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
                params = self.store._params(
                    bucket=bucket.id, queue=self.queue, limit=most - len(ids)
                )
                found = [int(r["id"]) for r in self.store._fetchall(query, params)]
                if found:
                    params = self.store._params(ids=self.store._ids(found))
                    self.store._execute("unpark_update", params)
                    ids += found
                if len(ids) >= most:
                    break
            if len(ids) < most:
                self.wake[bucket] = None  # none left (or locked: the chores look again)
                return len(ids)
        running = self.bound(bucket) + len(ids)
        self.wake[bucket] = wake_at(limit, running, self.windows.get(bucket), self.now)
        return len(ids)

    # --- the buckets -------------------------------------------------------------------------

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
        missing = [b for b in ordered if b not in rows]
        if missing:
            pairs = json.dumps([b.pair() for b in missing])
            self.store._execute("limit_insert", self.store._params(buckets=pairs))
            rows.update(self.fetch_locked(missing))
        self.states.update(rows)
        self.now = self.now or float(next(iter(rows.values()))["now"])
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
            window = _window(limit, state, self.now)
            if window is not None:
                self.windows[bucket] = window
            if limit is not None and limit.concurrency is not None:
                recount = recount or (
                    (counted is None and self.keeps_bound)
                    or self.has_parked(bucket)
                    or self.bound(bucket) + demand[bucket] > limit.concurrency
                )
        if recount:  # exact counts, from forkq_jobs itself, for every bucket held
            usage = self.store._fetchall("limit_usage", self.store._params())
            exact = self.plan.running(usage, self.states)
            for bucket in self.states:
                self.counted[bucket], self.added[bucket] = exact[bucket], 0
        for bucket in ordered:
            limit = self.plan.limits.get(bucket.name)
            self.room[bucket] = room_in(limit, self.bound(bucket), self.windows.get(bucket))

    def fetch_locked(self, buckets: Sequence[Bucket]) -> dict[Bucket, dict[str, Any]]:
        if len(buckets) == 1:
            [one] = buckets
            params = self.store._params(name=one.name, key=one.key)
            rows = self.store._fetchall("limit_lock_one", params)
        else:
            pairs = self.store._ids(cast(Any, [b.pair() for b in buckets]))
            rows = self.store._fetchall("limit_lock", self.store._params(buckets=pairs))
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


def _window(limit: LimitConfig | None, state: Mapping[str, Any], now: float) -> RateWindow | None:
    length = None if limit is None else slice_us(limit)
    if length is None:
        return None
    stored = (state["rate_slice_us"], state["rate_base"], state["rate_counts"])
    return RateWindow.load(length, stored, now)


# --- the chores and forkq status ---------------------------------------------------------------


def plan_for(config: Config, handler_queues: Mapping[str, str]) -> LimitPlan | None:
    """The worker's plan, or None when the config has no limits (claims as ever)."""
    return LimitPlan(config.limits, handler_queues) if config.limits else None


def look_after_parked(store: Store, config: Config) -> int:
    """The chores' pass (one host, every check tick): every bucket with parked jobs gets a
    row and a wake_at, so its jobs are looked at even when nothing else would (an operator
    retried a parked job, a row was pruned, the limit is gone from the config: then the
    next claim lets them all go); and bucket rows idle past their rate window are deleted.
    How many rows it wrote or deleted."""
    if not store.has_limits_schema():
        return 0
    parked: list[Bucket] = []
    after = ""
    while len(parked) < LOOK_PARKED:
        after = store._rows("parked_bucket_after", after=after)[0]["limit_wait"]
        if after is None:
            break
        parked.append(Bucket.parse(after))
    written = 0
    if parked:
        pairs = json.dumps([b.pair() for b in sorted(set(parked))])
        written += store._run("limit_wake", buckets=pairs)
    periods = [limit.rate.period for limit in config.limits if limit.rate is not None]
    age = 1.2 * max(periods, default=0.0) + 60.0

    def prune() -> int:
        with store._tx():
            idle = [
                (r["name"], r["limit_key"])
                for r in store._fetchall(
                    "limit_idle", store._params(age_us=micros(age), limit=PURGE_CHUNK)
                )
            ]
            if not idle:
                return 0
            return store._execute(
                "limit_delete", store._params(buckets=store._ids(cast(Any, idle)))
            )

    return written + store._retrying(prune)


@dataclass(frozen=True)
class BucketStatus:
    """One bucket as `forkq status` shows it."""

    limit: str
    key: str
    running: int
    concurrency: int | None
    started: int | None  # starts counted in the rate window now
    rate: str | None
    waiting: int  # jobs parked on it (counted up to the status cap)
    waiting_capped: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def bucket_status(store: Store, config: Config, cap: int = 100_000) -> list[BucketStatus]:
    """Per limit and key: running / concurrency, started in the rate window / rate, and
    jobs waiting; every bucket with a row or parked jobs, and every configured limit."""
    if not config.limits or not store.has_limits_schema():
        return []
    plan = LimitPlan(config.limits, {})
    rows = {Bucket(r["name"], r["limit_key"]): r for r in store._rows("limit_rows", limit=1000)}
    waiting_rows = store._rows("limit_waiting", limit=cap + 1)
    waiting = {Bucket.parse(r["limit_wait"]): int(r["n"]) for r in waiting_rows}
    capped = sum(waiting.values()) > cap
    buckets = set(rows) | set(waiting) | {Bucket(x.name) for x in config.limits if not x.per_key}
    running = plan.running(store._rows("limit_usage"), buckets)
    now = store.db_now()
    out = []
    for bucket in sorted(buckets):
        limit = plan.limits.get(bucket.name)
        window = None if limit is None else _window(limit, rows.get(bucket, _EMPTY), now)
        idle = not running[bucket] and not waiting.get(bucket) and not (window and window.used)
        if limit is None and idle:
            continue
        if idle and bucket.key:
            continue  # a tenant with nothing running, started or waiting: not news
        out.append(
            BucketStatus(
                limit=bucket.name,
                key=bucket.key,
                running=running[bucket],
                concurrency=None if limit is None else limit.concurrency,
                started=None if window is None else window.used,
                rate=None if limit is None or limit.rate is None else str(limit.rate),
                waiting=waiting.get(bucket, 0),
                waiting_capped=capped,
            )
        )
    return out


_EMPTY: dict[str, Any] = {"rate_slice_us": None, "rate_base": None, "rate_counts": None}
