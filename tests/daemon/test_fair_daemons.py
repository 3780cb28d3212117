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


def claim_order(db_url: str, tenant: str) -> list[int]:
    """The tenant's jobs in the order they were claimed (each started at its claim)."""
    rows = sql(db_url, "SELECT id, started_at FROM forkq_jobs WHERE group_key = ?", [tenant])
    assert all(started is not None for _, started in rows)
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


def test_a_fair_pool_under_limits_is_refused_at_boot(daemons: Factory, db_url: str) -> None:
    """A fair claim keeps no [limits]: a fair pool whose queue a limit covers stops the
    boot with exit 78 and says which pool."""
    daemon = daemons(pools={QUEUE: POOL})
    text = render_config(db_url, {QUEUE: POOL}, daemon.supervisor)
    daemon.write_config(text=text + '\n[limits.shops]\nqueues = ["fair"]\nconcurrency = 2\n')
    daemon.start()
    assert daemon.wait_exit(30) == 78, daemon.describe()
    stderr = daemon.stderr_text()
    assert "pools.fair.fair: a fair pool cannot be under [limits]" in stderr, stderr
    assert "Traceback" not in stderr
