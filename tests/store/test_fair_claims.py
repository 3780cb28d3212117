"""Claims of a fair pool on both backends (supervisor/store/limits/fair.py): tenants take turns,
the least recently served first, each tenant's jobs in priority / run_at / id order; a
tenant is a job's group_key, else its limit_key. In-process, with the store's own paths."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from util import backend_of, native_connection, sql

from supervisor.cluster.chores import Chores
from supervisor.config import LimitConfig, build_config
from supervisor.errors import ConfigError
from supervisor.models import JobRow
from supervisor.queue import Queue
from supervisor.store import Store, open_store
from supervisor.store.limits import fair
from supervisor.store.limits.buckets import LimitPlan

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


SHOPS = LimitConfig("shops", queues=(QUEUE,), concurrency=2, per_key=True)


def limited(store: Store, plan: LimitPlan, n: int = 1, owner: str = "h1") -> list[JobRow]:
    plan.next_look = 0.0  # look at due buckets on every claim: the tests do not wait 0.1 s
    return fair.complete_and_claim(store, {}, QUEUE, owner, n, LEASE, plan)[0]


def running_by_key(db_url: str) -> dict[str, int]:
    rows = sql(
        db_url,
        "SELECT limit_key, COUNT(*) FROM forkq_jobs WHERE status = 'running' GROUP BY limit_key",
    )
    return {str(key): int(n) for key, n in rows}


def test_under_a_limit_a_full_tenant_is_passed_over_and_its_order_kept(
    store: Store, queue: Queue, db_url: str
) -> None:
    """Per-key concurrency 2: tenants take turns until each has 2 running; then every
    bucket is full and a claim takes nothing (and parks nothing: each head stays ready,
    claimable); once one of A's ends, A's next job, in order, is the one served."""
    plan = LimitPlan((SHOPS,), {})
    keyed = {t: put(queue, t, 4, limit_key=t) for t in "ABC"}
    served = [row.limit_key for _ in range(6) for row in limited(store, plan)]
    assert served == ["A", "B", "C", "A", "B", "C"]
    assert limited(store, plan) == []
    assert running_by_key(db_url) == {"A": 2, "B": 2, "C": 2}
    heads = [store.get_job(ids[2]) for ids in keyed.values()]
    assert all(job is not None and (job.status, job.limit_wait) == ("ready", "") for job in heads)
    store.complete("h1", keyed["A"][:1], "delete")
    plan.ended("t.fair", QUEUE, "A")
    assert [row.id for row in limited(store, plan, 3)] == [keyed["A"][2]]
    assert running_by_key(db_url) == {"A": 2, "B": 2, "C": 2}


def test_a_full_tenant_first_in_turn_does_not_block_the_round(
    store: Store, queue: Queue, db_url: str
) -> None:
    """A's bucket is full (2 of its 50 running): claims of one job each serve B..F, each
    in its order, passing A over whenever its turn comes; A never passes 2."""
    plan = LimitPlan((SHOPS,), {})
    flood = put(queue, "A", 50, limit_key="A")
    assert [row.id for row in limited(store, plan, 2)] == flood[:1]
    assert [row.id for row in limited(store, plan, 2)] == flood[1:2]
    small = {t: put(queue, t, 2, limit_key=t) for t in "BCDEF"}
    order = [row.id for _ in range(10) for row in limited(store, plan)]
    assert sorted(order) == sorted(i for ids in small.values() for i in ids)
    for ids in small.values():
        assert [i for i in order if i in ids] == ids
    assert running_by_key(db_url)["A"] == 2


def test_a_job_of_a_limited_handler_in_a_fair_queue_keeps_its_limit(
    store: Store, queue: Queue, db_url: str
) -> None:
    """No limit names the fair queue, but one names a handler whose job is enqueued there:
    the fair claim finds it and keeps the limit (concurrency 1) from then on."""
    plan = LimitPlan((LimitConfig("one", handlers=("t.fair",), concurrency=1),), {})
    put(queue, "A", 3)
    put(queue, "B", 3)
    assert len(limited(store, plan)) == 1
    assert QUEUE in plan.limited_queues
    assert limited(store, plan) == [] and limited(store, plan, 3) == []
    assert sum(running_by_key(db_url).values()) == 1


def test_a_tenant_of_weight_3_keeps_its_turn_for_3_claims(store: Store, queue: Queue) -> None:
    """[pools.fair.weights] A = 3: A is served three claims in a row, then B and C (weight
    1) one each, and round again; each tenant's jobs in order."""
    ids = {t: put(queue, t, 6) for t in "ABC"}
    weights = {"A": 3}
    taken = []
    for _ in range(10):
        taken += fair.complete_and_claim(store, {}, QUEUE, "h1", 1, LEASE, None, weights)[0]
    served = "".join(tenant_of(store, row) for row in taken)
    assert served == "AAABCAAABC"
    assert [row.id for row in taken if row.id in ids["A"]] == ids["A"]


def test_weights_are_read_from_the_pool_and_need_fair() -> None:
    pools = {QUEUE: {"fair": True, "weights": {"shop-1": 3, "big": 10}}}
    config = build_config({"database": {"url": "sqlite:///x.db"}, "pools": pools}, "forkq.toml")
    assert config.pool(QUEUE).weights == (("big", 10), ("shop-1", 3))  # type: ignore[union-attr]
    for weights, problem in (({"a": 0}, "must be at least 1"), ({"a": "3"}, "expected an integer")):
        bad = {
            "database": {"url": "sqlite:///x.db"},
            "pools": {QUEUE: {"fair": True, "weights": weights}},
        }
        with pytest.raises(ConfigError, match=problem):
            build_config(bad, "forkq.toml")
    plain = {"database": {"url": "sqlite:///x.db"}, "pools": {"plain": {"weights": {"a": 2}}}}
    with pytest.raises(ConfigError, match=r"pools\.plain\.weights: weights are a fair pool's"):
        build_config(plain, "forkq.toml")
    # Every problem at once: a bad weight hid the missing `fair` until it was mended.
    plain["pools"] = {"plain": {"weights": {"a": 0}}}
    with pytest.raises(ConfigError) as both:
        build_config(plain, "forkq.toml")
    assert "must be at least 1" in str(both.value) and "add fair = true" in str(both.value)


def test_weights_under_a_limit_a_full_tenant_loses_the_rest_of_its_turn(
    store: Store, queue: Queue, db_url: str
) -> None:
    """A of weight 3 under per-key concurrency 2: A, A, then A's bucket is full and A is
    passed over (to the back, its turn ended) for B and C, until they are full too; with
    its slots free again A has a new turn of 3 claims, of which its bucket lets 2 run."""
    plan = LimitPlan((SHOPS,), {})
    ids = {t: put(queue, t, 6, limit_key=t) for t in "ABC"}

    def claims(n: int) -> str:
        plan.next_look = 0.0
        return "".join(
            row.limit_key or ""
            for _ in range(n)
            for row in fair.complete_and_claim(store, {}, QUEUE, "h1", 1, LEASE, plan, {"A": 3})[0]
        )

    assert claims(7) == "AABCBC"  # then every bucket is full
    assert running_by_key(db_url) == {"A": 2, "B": 2, "C": 2}
    store.complete("h1", ids["A"][:2], "delete")
    plan.ended("t.fair", QUEUE, "A")
    plan.ended("t.fair", QUEUE, "A")
    assert claims(3) == "AA"
    assert running_by_key(db_url)["A"] == 2
    [(served,)] = sql(db_url, "SELECT served FROM forkq_tenants WHERE tenant = 'A'")
    assert served == 0  # passed over at its third claim: its turn ended


def test_the_fallback_takes_no_job_of_a_limited_handler(
    store: Store, queue: Queue, db_url: str
) -> None:
    """Every tenant row is another claim's (held here by a second session), so the claim
    falls back to the queue's head: that head is a limited handler's job (no limit names
    the queue), so it is not taken there; the queue is claimed under limits from then on."""
    if backend_of(db_url) != "mysql":
        pytest.skip("SQLite claims one at a time (BEGIN IMMEDIATE)")
    plan = LimitPlan((LimitConfig("one", handlers=("t.fair",), concurrency=1),), {})
    put(queue, "A", 3)
    other = open_store(db_url)
    try:
        with other.transaction():
            held = other.query("fair_turn", other.bind(queue=QUEUE, limit=10))
            assert [row["tenant"] for row in held] == ["A"]
            assert limited(store, plan) == []
            assert QUEUE in plan.limited_queues
    finally:
        other.close()
    assert len(limited(store, plan)) == 1 and limited(store, plan) == []


def test_a_claim_that_finds_a_tenant_empty_reads_a_bounded_number_of_rows(
    mysql_db_url: str,
) -> None:
    """MariaDB: the claim that deletes the row of a tenant found without jobs (fair_forget)
    reads that tenant's index entries, not every job of the queue (it did, share-locking
    them all, with `status IN` in its subquery: deadlocks beside other claims)."""
    store: Any = open_store(mysql_db_url)
    queue = Queue(store=store)
    try:
        put(queue, "A", 500)
        [b] = put(queue, "B", 1)
        claim(store)  # the walk's first step; A's head
        assert b in [row.id for row in claim(store, 2)]
        store.complete("h1", [b], "delete")
        conn = store._connection()  # the store's own session: its counters are the claim's
        with conn.cursor() as cursor:
            before = handler_reads(cursor)
            claim(store, 2)  # A's head, and B found without a job: its row goes
            read = handler_reads(cursor) - before
        assert sorted(t for (t,) in sql(mysql_db_url, "SELECT tenant FROM forkq_tenants")) == ["A"]
        assert read < 60, f"{read} index reads for a claim of 2 among 500 jobs"
    finally:
        store.close()


def handler_reads(cursor: Any) -> int:
    cursor.execute(
        "SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_next', 'Handler_read_key')"
    )
    return sum(int(value) for _, value in cursor.fetchall())


def test_a_claim_that_finds_a_tenant_empty_waits_for_no_end_of_another_tenants_job(
    mysql_db_url: str,
) -> None:
    """MariaDB: the claim that forgets a tenant found without jobs locks none of the queue's
    running jobs. (As the subquery of its DELETE, the look for the tenant's running jobs on
    forkq_jobs_status share-locked every running job of the queue: a claim waited for any
    end in flight, and two claims that had each just written their successes deadlocked.)"""
    store: Any = open_store(mysql_db_url)
    queue = Queue(store=store)
    ack = native_connection(mysql_db_url)
    try:
        running = put(queue, "A", 5)
        for _ in range(3):  # three of A's jobs run, two are ready: A is not forgotten
            claim(store, 1, owner="h2")
        [b] = put(queue, "B", 1)
        assert [row.id for row in claim(store)] == [b]
        store.complete("h1", [b], "delete")  # B has nothing left: the next claim forgets it
        with ack.cursor() as cursor:  # another worker's end of A's job, not committed yet
            cursor.execute(
                "UPDATE forkq_jobs SET status = 'done' WHERE id = %s AND status = 'running'",
                (running[0],),
            )
        forgot = threading.Thread(target=claim, args=(store, 2))
        forgot.start()
        forgot.join(5)
        waited = forgot.is_alive()
        ack.commit()
        forgot.join(60)
        assert not waited, "the claim waited for another tenant's job to end"
        assert sorted(t for (t,) in sql(mysql_db_url, "SELECT tenant FROM forkq_tenants")) == ["A"]
    finally:
        ack.rollback()
        ack.close()
        store.close()


def test_a_grouped_enqueue_that_meets_a_busy_lock_is_never_inserted_twice(
    sqlite_db_url: str, tmp_path: Any
) -> None:
    """SQLite, Queue.enqueue(group_key=...): the INSERT committed on its own, then the
    tenant's joining the round met another writer's lock, and the retry sent the INSERT
    again (600 enqueues made 621 jobs under load). Another writer takes the lock right
    between the two statements here: it must find them one transaction."""
    from supervisor import Queue
    from supervisor.store import open_store

    store = open_store(sqlite_db_url)
    path = str(tmp_path / "forkq.db")
    other = sqlite3.connect(path, timeout=0, isolation_level=None, check_same_thread=False)
    took: list[bool] = []

    def between(statement: str) -> None:
        if "forkq_tenants" not in statement or took:
            return
        try:
            other.execute("BEGIN IMMEDIATE")  # the lock, as a busy worker holds it
        except sqlite3.OperationalError:
            took.append(False)  # forkq held it: the INSERT and the join are one transaction
            return
        took.append(True)
        threading.Timer(0.3, lambda: other.execute("ROLLBACK")).start()

    try:
        store._connection().set_trace_callback(between)
        job_id = Queue(store=store).enqueue("t.job", {"n": 1}, queue="fair", group_key="acme")
        store._connection().set_trace_callback(None)
        assert took == [False], took
        rows = sql(sqlite_db_url, "SELECT id FROM forkq_jobs")
        assert [int(r[0]) for r in rows] == [job_id]
    finally:
        store.close()
        other.close()
