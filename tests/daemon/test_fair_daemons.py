"""Fair share within a queue with two real daemons on one database (both backends): one
tenant's flood never starves the others' trickles. Every figure comes from what the
handlers wrote (t.record appends `id,pid,start,end`: one host, one clock) and from the
jobs left in the table."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from daemon_util import Daemon, record_ids, render_config
from util import sql, wait_until

from supervisor import Queue

Factory = Callable[..., Daemon]
QUEUE = "fair"
FLOOD = 20_000
SMALL = [chr(c) for c in range(ord("B"), ord("L"))]  # tenants B..K
EACH = 10
# One job a claim, each started as it is claimed (started_at: the claim's clock), and
# kept when done: the order a tenant's jobs were claimed in can be read back.
POOL = {"workers": 2, "fair": True, "claim_batch": 1, "on_success": "keep"}


def claim_order(db_url: str, tenant: str, *, every: bool = True) -> list[int]:
    """The tenant's jobs in the order they were claimed (each started at its claim); with
    `every`, all of them must have been."""
    rows = sql(db_url, "SELECT id, started_at FROM forkq_jobs WHERE group_key = ?", [tenant])
    assert not every or all(started is not None for _, started in rows)
    rows = [row for row in rows if row[1] is not None]
    return [int(job_id) for job_id, _ in sorted(rows, key=lambda row: (row[1], row[0]))]


def left_of(db_url: str, tenant: str) -> int:
    [(n,)] = sql(
        db_url,
        "SELECT COUNT(*) FROM forkq_jobs WHERE group_key = ? AND status = 'ready'",
        [tenant],
    )
    return int(n)


def test_small_tenants_finish_long_before_a_flood_ahead_of_them(
    daemons: Factory, db_url: str, tmp_path: Path
) -> None:
    """Tenant A enqueues 20,000 jobs, then B..K 10 each: all of B..K are done while A still
    has more than 15,000 waiting; each small tenant's jobs are claimed (and started) in
    their order; no job runs twice."""
    record = tmp_path / "small.rec"
    queue = Queue(db_url, wake=False)
    try:
        flood = {"handler": "t.noop", "queue": QUEUE, "group_key": "A"}
        for _ in range(FLOOD // 2000):
            queue.enqueue_many([flood] * 2000)
        ids: dict[str, list[int]] = {}
        for tenant in SMALL:
            spec = {"handler": "t.record", "queue": QUEUE, "group_key": tenant}
            ids[tenant] = queue.enqueue_many([{**spec, "payload": {"file": str(record)}}] * EACH)
    finally:
        queue.close()
    first = daemons(pools={QUEUE: POOL}, name="one").start()
    second = daemons(pools={QUEUE: POOL}, name="two").start()
    wait_until(
        lambda: len(record_ids(record)) >= len(SMALL) * EACH,
        timeout=120,
        message="every job of B..K ran",
    )
    flood_left = left_of(db_url, "A")
    assert first.stop() == 0 and second.stop() == 0
    assert flood_left > 15_000, flood_left
    ran = record_ids(record)
    assert len(ran) == len(set(ran)) == len(SMALL) * EACH  # nothing ran twice
    for tenant, tenant_ids in ids.items():
        assert claim_order(db_url, tenant) == tenant_ids, tenant


LIMITS = '\n[limits.shops]\nqueues = ["fair"]\nconcurrency = 2\nper_key = true\n'
LIMITED_FLOOD = 1000


def spans_by_id(record: Path) -> dict[int, tuple[float, float]]:
    """Each run's (start, end), from the handlers' own lines (`id,pid,start,end`)."""
    lines = record.read_text().splitlines() if record.exists() else []
    return {int(i): (float(s), float(e)) for i, _, s, e in (line.split(",") for line in lines)}


def most_at_once(spans: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    worst = now = 0
    for _, step in events:  # an end sorts before a start at the same instant
        now += step
        worst = max(worst, now)
    return worst


def test_under_a_per_key_limit_a_full_tenant_never_blocks_the_round(
    daemons: Factory, db_url: str, tmp_path: Path
) -> None:
    """A fair pool under [limits.shops] (concurrency 2 per limit_key), two daemons of two
    workers: A floods 1,000 slow jobs, then B..K 10 quick ones each. A's bucket is full
    (2 running) while B..K all finish with nearly all of A's still waiting; no key ever
    runs more than 2 (the handlers' own records); each tenant's jobs are claimed in order;
    nothing runs twice."""
    record = tmp_path / "runs.rec"
    queue = Queue(db_url, wake=False)
    try:
        slow = {"handler": "t.record", "queue": QUEUE, "group_key": "A", "limit_key": "A"}
        flood = queue.enqueue_many(
            [{**slow, "payload": {"file": str(record), "seconds": 0.5}}] * LIMITED_FLOOD
        )
        ids: dict[str, list[int]] = {"A": flood}
        for tenant in SMALL:
            spec = {"handler": "t.record", "queue": QUEUE, "group_key": tenant, "limit_key": tenant}
            ids[tenant] = queue.enqueue_many([{**spec, "payload": {"file": str(record)}}] * EACH)
    finally:
        queue.close()
    hosts = []
    for name in ("one", "two"):
        daemon = daemons(pools={QUEUE: POOL}, name=name)
        daemon.write_config(text=render_config(db_url, {QUEUE: POOL}, daemon.supervisor) + LIMITS)
        hosts.append(daemon.start())
    small = {i for tenant in SMALL for i in ids[tenant]}
    wait_until(
        lambda: small <= set(record_ids(record)), timeout=120, message="every job of B..K ran"
    )
    flood_left = left_of(db_url, "A")
    wait_until(  # and A's slots used to the full: both of its slots busy at once
        lambda: len(set(flood) & set(record_ids(record))) >= 8, timeout=60, message="8 of A ran"
    )
    assert all(host.stop() == 0 for host in hosts)
    assert flood_left > LIMITED_FLOOD - 200, flood_left
    ran = record_ids(record)
    assert len(ran) == len(set(ran))  # nothing ran twice
    spans = spans_by_id(record)
    at_once = {
        t: most_at_once([spans[i] for i in tenant_ids if i in spans])
        for t, tenant_ids in ids.items()
    }
    print(f"fair-limits-figure most at once per key {at_once}, A left {flood_left}")
    assert max(at_once.values()) <= 2 and at_once["A"] == 2, at_once
    for tenant, tenant_ids in ids.items():
        order = claim_order(db_url, tenant, every=tenant != "A")
        assert order == tenant_ids[: len(order)], tenant
