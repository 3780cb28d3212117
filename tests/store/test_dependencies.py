"""Dependencies (SPEC "Composing jobs"): depends_on, chain, group.then, on both backends,
through the product's own paths (enqueue, claim, complete, fail, cancel)."""

from __future__ import annotations

import threading

import pytest
from store_util import LEASE, A, B, status
from util import backend_of, count_rows, sql

from supervisor import Queue
from supervisor.config import LimitConfig
from supervisor.errors import UsageError
from supervisor.kinds import OnSuccess
from supervisor.store import Store
from supervisor.store.limits import claims as flow
from supervisor.store.limits.buckets import LimitPlan


def run_one(store: Store, owner: str = A, queue: str = "work") -> int:
    """Claim the one due job of `queue` and record its success; its id."""
    [row] = store.claim(queue, owner, 1, LEASE)
    assert store.complete(owner, [row.id], OnSuccess.KEEP) == 1
    return row.id


def kill_one(store: Store, owner: str = A, queue: str = "work") -> int:
    [row] = store.claim(queue, owner, 1, LEASE)
    assert store.fail(owner, row.id, "boom", dead=True)
    return row.id


def test_a_child_waits_for_every_parent_and_is_never_claimed_before(
    queue: Queue, store: Store
) -> None:
    a = queue.enqueue("test.a", queue="work")
    b = queue.enqueue("test.b", queue="work")
    child = queue.enqueue("test.c", queue="work", depends_on=[a, b])
    assert status(store, child) == "waiting"
    assert store.parents_of(child) == [a, b]
    assert store.dependents_of(a) == [child]
    assert run_one(store) == a
    assert status(store, child) == "waiting"  # b is not done
    assert run_one(store) == b
    assert status(store, child) == "ready"
    assert run_one(store) == child


def test_a_parent_deleted_on_success_releases_its_child(queue: Queue, store: Store) -> None:
    parent = queue.enqueue("test.a", queue="work")
    child = queue.enqueue("test.c", queue="work", depends_on=[parent])
    [row] = store.claim("work", A, 1, LEASE)
    assert store.complete(A, [row.id], OnSuccess.DELETE) == 1  # the default mode
    assert store.get_job(parent) is None
    assert status(store, child) == "ready"


@pytest.mark.parametrize("mode", [OnSuccess.DELETE, OnSuccess.KEEP])
def test_the_claim_that_writes_a_parents_success_takes_the_child_it_released(
    queue: Queue, store: Store, mode: OnSuccess
) -> None:
    """A chain's next step starts at once: the worker that ends a parent claims the child
    in the transaction that released it, not at the next poll (a regression once: the
    success and the claim's read went in one packet, the release after the read)."""
    parent = queue.enqueue("test.a", queue="work")
    child = queue.enqueue("test.c", queue="work", depends_on=[parent])
    other = queue.enqueue("test.b", queue="work", priority=-1)  # behind the child in order
    [row] = store.claim("work", A, 1, LEASE)
    assert row.id == parent
    batch, completed = store.complete_and_claim({mode: [parent]}, "work", A, 10, LEASE)
    assert completed == 1
    assert [r.id for r in batch] == [child, other]
    assert status(store, child) == "running"
    assert store.complete_and_claim({}, "work", B, 1, LEASE)[0] == []  # nothing else is ready


def test_a_released_child_takes_its_place_in_a_full_claim(queue: Queue, store: Store) -> None:
    """The child keeps its run_at: it goes before jobs enqueued after it, even when the
    claim that releases it is full without it."""
    parent = queue.enqueue("test.a", queue="work")
    child = queue.enqueue("test.c", queue="work", depends_on=[parent])
    later = [queue.enqueue("test.b", queue="work") for _ in range(3)]
    assert [r.id for r in store.claim("work", A, 1, LEASE)] == [parent]
    batch, _ = store.complete_and_claim({OnSuccess.DELETE: [parent]}, "work", A, 2, LEASE)
    assert [r.id for r in batch] == [child, later[0]]
    assert [status(store, j) for j in later] == ["running", "ready", "ready"]


def test_parents_already_done_or_gone_count_as_done(queue: Queue, store: Store) -> None:
    parent = queue.enqueue("test.a", queue="work")
    run_one(store)
    gone = queue.enqueue("test.b", queue="work")
    [row] = store.claim("work", A, 1, LEASE)
    store.complete(A, [row.id], OnSuccess.DELETE)
    child = queue.enqueue("test.c", queue="work", depends_on=[parent, gone])
    assert status(store, child) == "ready"
    assert store.parents_of(child) == [parent, gone]


def test_an_unknown_parent_is_refused_and_nothing_is_written(queue: Queue, store: Store) -> None:
    real = queue.enqueue("test.a", queue="work")
    with pytest.raises(UsageError, match="no job 99999999"):
        queue.enqueue("test.c", queue="work", depends_on=[real, 99999999])
    assert [j.id for j in store.list_jobs()] == [real]
    assert store.dependents_of(real) == []
    for bad in ([0], ["1"], "12", [True]):
        with pytest.raises(UsageError):
            queue.enqueue("test.c", depends_on=bad)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="on_parent_failure"):
        queue.enqueue("test.c", depends_on=[real], on_parent_failure="ignore")


def test_a_dead_parent_cancels_its_dependents_transitively(queue: Queue, store: Store) -> None:
    parent = queue.enqueue("test.a", queue="work")
    child, grandchild = queue.chain([queue.job("test.b", queue="work"), queue.job("test.c")])
    store_child = queue.enqueue("test.d", queue="work", depends_on=[parent])
    keep_going = queue.enqueue(
        "test.e", queue="work", depends_on=[parent], on_parent_failure="continue"
    )
    assert kill_one(store) == parent
    assert status(store, store_child) == "cancelled"
    assert "parent job" in (store.get_job(store_child).last_error or "")  # type: ignore[union-attr]
    assert status(store, keep_going) == "ready"
    assert status(store, child) == "ready"  # the chain did not depend on the dead job
    late = queue.enqueue("test.f", queue="work", depends_on=[parent])
    assert status(store, late) == "cancelled"  # the rule applies at enqueue too
    assert store.parents_of(late) == []  # ended at once: no rows kept for it
    cont = queue.enqueue("test.g", depends_on=[parent], on_parent_failure="continue")
    assert status(store, cont) == "ready"
    assert status(store, grandchild) == "waiting"


def test_cancelling_a_waiting_parent_cancels_the_rest_of_its_chain(
    queue: Queue, store: Store
) -> None:
    ids = queue.chain([queue.job("test.a", queue="work") for _ in range(4)])
    assert [status(store, i) for i in ids] == ["ready", "waiting", "waiting", "waiting"]
    assert store.cancel_jobs([ids[1]], "test")[ids[1]].ok
    assert [status(store, i) for i in ids] == ["ready", "cancelled", "cancelled", "cancelled"]
    run_one(store)
    assert store.claim("work", A, 10, LEASE) == []


def test_a_running_parent_cancelled_cancels_its_children(queue: Queue, store: Store) -> None:
    parent, child = queue.chain([queue.job("test.a", queue="work"), queue.job("test.b")])
    [row] = store.claim("work", A, 1, LEASE)
    assert store.cancel_jobs([parent], "test")[parent].ok
    assert status(store, child) == "waiting"  # still running: its host kills it first
    assert store.finish_cancel(parent)
    assert status(store, child) == "cancelled"
    assert row.id == parent


def test_group_then_runs_after_every_job_of_the_group(queue: Queue, store: Store) -> None:
    group = queue.group([queue.job("test.a", {"n": n}, queue="work") for n in range(3)])
    after = group.then(queue.job("test.after", queue="work"))
    assert store.parents_of(after) == group.ids == list(group) and len(group) == 3
    for _ in range(3):
        assert run_one(store) in group.ids
        assert status(store, after) in ("waiting", "ready")
    assert status(store, after) == "ready"
    assert run_one(store) == after
    assert store.parents_of(after) == [] and store.dependents_of(group.ids[0]) == []


def test_rows_of_forkq_dependencies_go_when_their_child_ends(
    queue: Queue, store: Store, db_url: str
) -> None:
    ids = queue.chain([queue.job("test.a", queue="work") for _ in range(3)])
    doomed = queue.enqueue("test.b", queue="work", depends_on=[ids[2]])
    assert count_rows(db_url, "forkq_dependencies") == 3
    run_one(store)
    run_one(store)
    assert count_rows(db_url, "forkq_dependencies") == 2  # ids[1] ended: its row went
    kill_one(store)  # ids[2] ends dead: its own row goes, and its child's, cancelled
    assert status(store, doomed) == "cancelled"
    assert count_rows(db_url, "forkq_dependencies") == 0


def test_a_job_enqueued_while_its_parent_runs_is_released_by_its_end(
    queue: Queue, store: Store
) -> None:
    parent = queue.enqueue("test.a", queue="work")
    [row] = store.claim("work", A, 1, LEASE)  # claimed before the child exists
    child = queue.enqueue("test.b", queue="work", depends_on=[parent])
    assert status(store, child) == "waiting"
    assert store.complete(A, [row.id], OnSuccess.DELETE) == 1
    assert status(store, child) == "ready"


def test_two_parents_ending_at_once_release_their_child_once(
    queue: Queue, store: Store, db_url: str
) -> None:
    """Many children of two parents, the two parents ended by two connections at once:
    every child ends ready, none is left waiting (the release is exact, see
    dependencies.py). The server's deadlocks and row lock waits meanwhile are printed."""
    before = lock_counters(db_url)
    for _ in range(10):
        first = queue.enqueue("test.a", queue="p1")
        second = queue.enqueue("test.b", queue="p2")
        children = [
            queue.enqueue("test.c", queue="kids", depends_on=[first, second]) for _ in range(3)
        ]
        other = Queue(store.url).store  # type: ignore[attr-defined]
        try:
            [one] = store.claim("p1", A, 1, LEASE)
            [two] = other.claim("p2", B, 1, LEASE)
            barrier = threading.Barrier(2)

            def finish(
                s: Store, owner: str, job_id: int, barrier: threading.Barrier = barrier
            ) -> None:
                barrier.wait()
                assert s.complete(owner, [job_id], OnSuccess.KEEP) == 1

            threads = [
                threading.Thread(target=finish, args=(store, A, one.id)),
                threading.Thread(target=finish, args=(other, B, two.id)),
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        finally:
            other.close()
        assert [status(store, c) for c in children] == ["ready"] * 3
    assert len(store.claim("kids", A, 100, LEASE)) == 30
    after = lock_counters(db_url)
    print(
        f"\n[lock figures] two parents x10, server-wide: { {k: after[k] - before[k] for k in after} }"
    )


def lock_counters(url: str) -> dict[str, int]:
    """InnoDB's deadlocks and row lock waits (the whole server: other sessions count too)."""
    if backend_of(url) != "mysql":
        return {}
    rows = sql(
        url,
        "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_deadlocks', 'Innodb_row_lock_waits')",
    )
    return {str(name): int(value) for name, value in rows}


def test_depends_on_is_refused_with_a_unique_key_or_a_connection(queue: Queue) -> None:
    parent = queue.enqueue("test.a")
    with pytest.raises(UsageError):
        queue.enqueue("test.b", unique_key="k", depends_on=[parent])


def test_a_parent_refused_dead_by_a_claim_under_limits_cancels_its_child(
    queue: Queue, store: Store, db_url: str
) -> None:
    """Another program's row no bucket can hold (a limit_key with a NUL) ends dead in the
    claim that meets it: its child is settled in that transaction."""
    parent = queue.enqueue("m.send", queue="email", limit_key="tenant")
    child = queue.enqueue("m.send", queue="email", depends_on=[parent])
    sql(db_url, "UPDATE forkq_jobs SET limit_key = ? WHERE id = ?", ["bad\x00key", parent])
    plan = LimitPlan([LimitConfig("mail", handlers=("m.send",), concurrency=5, per_key=True)], {})
    assert flow.complete_and_claim(store, plan, {}, "email", A, 10, LEASE)[0] == []
    assert [status(store, parent), status(store, child)] == ["dead", "cancelled"]


def test_a_released_child_due_later_is_scheduled_not_ready(queue: Queue, store: Store) -> None:
    parent = queue.enqueue("test.a", queue="work")
    child = queue.enqueue("test.b", queue="work", delay=3600, depends_on=[parent])
    assert status(store, child) == "waiting"
    run_one(store)
    assert status(store, child) == "scheduled"


def test_the_end_of_a_job_without_dependencies_stays_one_statement(
    queue: Queue, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hot path: a batch of plain jobs ends with the one statement it always had; only a
    flagged job (a parent, a child) takes the second pass."""
    names: list[str] = []
    execute, fetch = store._execute, store._fetchall  # type: ignore[attr-defined]

    def counted(run: object) -> object:
        def call(name: str, params: dict[str, object]) -> object:
            names.append(name)
            return run(name, params)  # type: ignore[operator]

        return call

    queue.enqueue_many([{"handler": "test.a", "queue": "work"}] * 3)
    rows = store.claim("work", A, 3, LEASE)
    store.has_deps_schema()  # asked once per store, before the count
    monkeypatch.setattr(store, "_execute", counted(execute))
    monkeypatch.setattr(store, "_fetchall", counted(fetch))
    assert store.complete(A, [r.id for r in rows], OnSuccess.DELETE) == 3
    assert names == ["deps_complete_delete"]
    parent = queue.enqueue("test.a", queue="work")
    queue.enqueue("test.b", queue="work", depends_on=[parent])
    [row] = store.claim("work", A, 1, LEASE)
    names.clear()
    assert store.complete(A, [row.id], OnSuccess.DELETE) == 1
    assert names[:3] == ["deps_complete_delete", "deps_held", "deps_complete_delete"]
    assert "deps_release" in names
