"""Claims of a fair pool on both backends (supervisor/store/limits/fair.py): tenants take turns,
the least recently served first, each tenant's jobs in priority / run_at / id order; a
tenant is a job's group_key, else its limit_key. In-process, with the store's own paths."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest
from util import backend_of, sql

from supervisor.cluster.chores import Chores
from supervisor.config import LimitConfig, build_config
from supervisor.errors import ConfigError
from supervisor.models import JobRow
from supervisor.queue import Queue
from supervisor.store import Store, open_store
from supervisor.store.limits import fair

QUEUE = "fair"
LEASE = 60.0


@pytest.fixture(autouse=True)
def fresh_walk() -> Iterator[None]:
    """Each test's database is new: the walk through its tenants starts at the first."""
    fair._walk.clear()
    fair._steps.clear()
    yield
    fair._walk.clear()
    fair._steps.clear()


def put(queue: Queue, tenant: str | None, n: int, **options: object) -> list[int]:
    spec = {"handler": "t.fair", "queue": QUEUE, "group_key": tenant, **options}
    return queue.enqueue_many([{**spec, "payload": {"n": i}} for i in range(n)])


def claim(store: Store, n: int = 1, owner: str = "h1") -> list[JobRow]:
    return fair.complete_and_claim(store, {}, QUEUE, owner, n, LEASE)[0]


def tenant_of(store: Store, row: JobRow) -> str:
    job = store.get_job(row.id)
    assert job is not None
    return job.group_key or job.limit_key or ""


def test_tenants_take_turns_whatever_came_first(store: Store, queue: Queue) -> None:
    """A's 6 jobs came first; B and C still get one job in turn each, not after A."""
    put(queue, "A", 6)
    put(queue, "B", 2)
    put(queue, "C", 2)
    served = [tenant_of(store, row) for _ in range(10) for row in claim(store)]
    assert served == ["A", "B", "C", "A", "B", "C", "A", "A", "A", "A"]
    assert claim(store) == []


def test_the_least_recently_served_go_first_one_job_each(store: Store, queue: Queue) -> None:
    """A batch claim takes one job per tenant, in turn order; the next batch starts with
    the tenants it left out."""
    for tenant in "ABCDE":
        put(queue, tenant, 3)
    for _ in range(5):  # every tenant served once: the round is A B C D E
        claim(store)
    first = [tenant_of(store, row) for row in claim(store, 3)]
    assert first == ["A", "B", "C"]
    assert [tenant_of(store, row) for row in claim(store, 3)] == ["D", "E", "A"]


def test_within_a_tenant_priority_then_run_at_then_id(store: Store, queue: Queue) -> None:
    low, high, middle = (put(queue, "A", 1, priority=p)[0] for p in (0, 5, 1))
    later, first = put(queue, "A", 2)
    order = [row.id for _ in range(5) for row in claim(store)]
    assert order == [high, middle, low, later, first]


def test_a_limit_key_is_the_tenant_without_a_group_key(store: Store, queue: Queue) -> None:
    queue.enqueue_many(
        [{"handler": "t.fair", "queue": QUEUE, "limit_key": "shop-1"} for _ in range(3)]
        + [{"handler": "t.fair", "queue": QUEUE, "limit_key": "shop-2"}]
    )
    assert [row.limit_key for _ in range(3) for row in claim(store)] == [
        "shop-1",
        "shop-2",
        "shop-1",
    ]


def test_scheduled_jobs_wait_and_a_raw_insert_joins_the_round(
    store: Store, queue: Queue, db_url: str
) -> None:
    """Only ready jobs due now are claimed; a job of a raw INSERT with a group_key (no
    forkq code at enqueue) is found by the walk and served in turn."""
    put(queue, "A", 3)
    [later] = put(queue, "B", 1, delay=3600)
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload, group_key)"
        " VALUES ('fair', 't.fair', '{}', 'Z')",
    )
    served = [tenant_of(store, row) for _ in range(5) for row in claim(store)]
    assert sorted(served) == ["A", "A", "A", "Z"] and served.index("Z") < 3
    assert claim(store) == []
    job = store.get_job(later)
    assert job is not None and job.status == "scheduled"


def test_tenants_of_producers_jobs_join_the_round_at_enqueue(
    store: Store, queue: Queue, db_url: str
) -> None:
    """Queue.enqueue and enqueue_many add the row of a group_key's tenant in its queue (a
    raw INSERT leaves it to the claims' walk); a job without one adds none."""
    queue.enqueue("t.fair", {}, queue=QUEUE, group_key="one")
    put(queue, "many", 2)
    queue.enqueue("t.fair", {}, queue=QUEUE, limit_key="keyed")
    queue.enqueue("t.fair", {}, queue="other", group_key="elsewhere")
    assert sorted(sql(db_url, "SELECT queue, tenant, last_served FROM forkq_tenants")) == [
        (QUEUE, "many", 0),
        (QUEUE, "one", 0),
        ("other", "elsewhere", 0),
    ]


def test_the_chores_prune_rounds_of_queues_no_pool_makes_fair(
    store: Store, queue: Queue, db_url: str
) -> None:
    put(queue, "kept", 1)
    queue.enqueue("t.fair", {}, queue="plain", group_key="nobody-serves-this")
    raw = {"database": {"url": db_url}, "pools": {QUEUE: {"fair": True}, "plain": {}}}
    assert Chores(store, build_config(raw, "forkq.toml")).run().leader
    assert sql(db_url, "SELECT queue, tenant FROM forkq_tenants") == [(QUEUE, "kept")]


def test_a_tenant_keeps_its_turn_while_its_jobs_run_and_leaves_once_done(
    store: Store, queue: Queue, db_url: str
) -> None:
    """A tenant found with nothing ready but a job running stays in the round (at its
    back): the job handed back is ready again in turn. With nothing left it goes."""
    [x] = put(queue, "X", 1)
    put(queue, "Y", 5)

    def tenants() -> list[str]:
        return sorted(t for (t,) in sql(db_url, "SELECT tenant FROM forkq_tenants"))

    assert [row.id for row in claim(store)] == [x]
    claim(store, 2)  # X has nothing ready: it stays, behind Y
    assert tenants() == ["X", "Y"]
    store.release("h1", [x])  # handed back: ready again, its tenant still in the round
    assert x in [row.id for row in claim(store, 2)]
    store.complete("h1", [x], "delete")
    claim(store, 2)
    assert tenants() == ["Y"]


def test_concurrent_claims_never_take_a_job_twice(db_url: str, queue: Queue) -> None:
    if backend_of(db_url) != "mysql":
        pytest.skip("SQLite claims one at a time (BEGIN IMMEDIATE)")
    for tenant in "ABCDEFGH":
        put(queue, tenant, 50)
    taken: list[list[int]] = [[] for _ in range(4)]

    def drain(index: int) -> None:
        store = open_store(db_url)
        try:
            while batch := fair.complete_and_claim(store, {}, QUEUE, f"h{index}", 3, LEASE)[0]:
                taken[index].extend(row.id for row in batch)
        finally:
            store.close()

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    ids = [job_id for batch in taken for job_id in batch]
    assert len(ids) == len(set(ids)) == 400


def test_a_fair_pool_under_limits_is_a_config_error() -> None:
    raw = {"database": {"url": "sqlite:///x.db"}, "pools": {QUEUE: {"fair": True}}}
    config = build_config(raw, "forkq.toml")
    assert config.pool(QUEUE) is not None and config.pool(QUEUE).fair  # type: ignore[union-attr]
    fair.check_config(config, {"t.fair": QUEUE})  # no limits: fine
    by_queue = LimitConfig("shops", queues=(QUEUE,), concurrency=2, per_key=True)
    by_handler = LimitConfig("mail", handlers=("t.fair",), concurrency=2)
    for limit in (by_queue, by_handler):
        with pytest.raises(ConfigError, match="fair pool cannot be under"):
            fair.check_config(replace(config, limits=(limit,)), {"t.fair": QUEUE})
    other = LimitConfig("mail", handlers=("t.other",), concurrency=2)
    fair.check_config(replace(config, limits=(other,)), {"t.other": "mail", "t.fair": QUEUE})
