"""Limits outside the claims: the chores' pass over buckets with parked jobs (and idle
bucket rows), and `forkq status`'s view of every bucket. The claims: limits.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from supervisor.config import Config
from supervisor.errors import SchemaError
from supervisor.store.base import Store
from supervisor.store.core import PURGE_CHUNK, micros
from supervisor.store.limits.buckets import Bucket, LimitPlan
from supervisor.store.limits.locks import rate_window

LOOK_PARKED = 200  # buckets with parked jobs the chores look at per tick


def look_after_parked(store: Store, config: Config) -> int:
    """The chores' pass (one host, every check tick): every bucket with parked jobs gets a
    row and a wake_at, so its jobs are looked at even when nothing else would (an operator
    retried a parked job, a row was pruned); jobs parked on a limit gone from the config
    are let go (let_go_of_gone); and bucket rows idle past their rate window are deleted.
    How many rows it wrote, let go or deleted."""
    if not store.has_limits_schema():
        return 0
    parked: list[Bucket] = []
    after = ""
    while len(parked) < LOOK_PARKED:
        after = store.rows("parked_bucket_after", after=after)[0]["limit_wait"]
        if after is None:
            break
        parked.append(Bucket.parse(after))
    written = let_go_of_gone(store, config, parked)
    if parked:
        pairs = json.dumps([b.pair() for b in sorted(set(parked))])
        written += store.run("limit_wake", buckets=pairs)
    periods = [limit.rate.period for limit in config.limits if limit.rate is not None]
    age = 1.2 * max(periods, default=0.0) + 60.0

    def prune() -> int:
        with store.transaction():
            idle = [
                (r["name"], r["limit_key"])
                for r in store.query(
                    "limit_idle", store.bind(age_us=micros(age), limit=PURGE_CHUNK)
                )
            ]
            if not idle:
                return 0
            return store.statement(
                "limit_delete", store.bind(buckets=store.bind_ids(cast(Any, idle)))
            )

    return written + store.retrying(prune)


def let_go_of_gone(store: Store, config: Config, parked: list[Bucket]) -> int:
    """Jobs parked on a limit the config no longer has: a plain claim never takes them (it
    reads the ready jobs no limit holds back, forkq_jobs_limit's ready_wait = ''), and a
    claim under another limit lets them go only when it looks at their bucket (claims.py),
    so the chores let them go too, in claim order, a page a transaction and at most
    LET_GO_MOST a tick (a tick stays short however many keys the limit had)."""
    names = {limit.name for limit in config.limits}
    gone = [bucket for bucket in parked if bucket.name not in names]

    def let_go(bucket: Bucket, most: int) -> int:
        with store.transaction():
            params = store.bind(bucket=bucket.id, limit=most)
            ids = [int(r["id"]) for r in store.query("unpark_select", params)]
            if ids:
                store.statement("unpark_update", store.bind(ids=store.bind_ids(ids)))
            return len(ids)

    freed = 0
    for bucket in gone:
        if freed >= LET_GO_MOST:
            break
        freed += store.retrying(partial(let_go, bucket, min(LET_GO_PAGE, LET_GO_MOST - freed)))
    return freed


LET_GO_PAGE = 500  # jobs let go in one transaction (one bucket whose limit is gone)
LET_GO_MOST = 2_000  # jobs let go per check tick, all such buckets together


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
    version = store.schema_version() or 0
    if version < store.indexed_columns_version:  # limit_waiting reads ready_wait (MariaDB)
        raise SchemaError(
            f"the jobs waiting on [limits] are counted on schema version"
            f" {store.indexed_columns_version}: run `forkq schema apply`"
        )
    plan = LimitPlan(config.limits, {})
    rows = {Bucket(r["name"], r["limit_key"]): r for r in store.rows("limit_rows", limit=1000)}
    waiting_rows = store.rows("limit_waiting", limit=cap + 1)
    waiting = {Bucket.parse(r["limit_wait"]): int(r["n"]) for r in waiting_rows}
    capped = sum(waiting.values()) > cap
    buckets = set(rows) | set(waiting) | {Bucket(x.name) for x in config.limits if not x.per_key}
    running = plan.running(store.rows("limit_usage"), buckets)
    now = store.db_now()
    out = []
    for bucket in sorted(buckets):
        limit = plan.limits.get(bucket.name)
        window = None if limit is None else rate_window(limit, rows.get(bucket, _EMPTY), now)
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
