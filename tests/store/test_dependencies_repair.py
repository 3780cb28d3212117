"""Dependencies, second look: what retry does to a job with parents, and the chores'
sweep that releases a child whose release was missed (store/dependencies.py), on both
backends through the product's paths."""

from __future__ import annotations

import pytest
from store_util import LEASE, A, status
from util import count_rows, sql

from supervisor import Queue
from supervisor.cli import parser as cli
from supervisor.cluster.chores import Chores
from supervisor.config import LimitConfig, build_config
from supervisor.errors import UsageError
from supervisor.kinds import OnSuccess
from supervisor.store import Store, open_store
from supervisor.store.core import DEPS_SCHEMA_VERSION
from supervisor.store.limits import claims as flow
from supervisor.store.limits.buckets import LimitPlan


def test_a_waiting_job_is_not_retried_so_it_never_runs_before_its_parents(
    queue: Queue, store: Store, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = queue.enqueue("test.a", queue="work")
    child = queue.enqueue("test.b", queue="work", depends_on=[parent])
    assert store.retry_jobs([child]) == 0
    assert status(store, child) == "waiting"
    assert cli.main(["retry", str(child), "--database", db_url]) != 0
    assert f"job {child} (waiting on its parents)" in capsys.readouterr().err
    assert status(store, child) == "waiting"
    [row] = store.claim("work", A, 10, LEASE)
    assert row.id == parent  # the child is not claimed before its parent is done
    assert store.complete(A, [parent], OnSuccess.KEEP) == 1
    assert status(store, child) == "ready"


def test_a_child_cancelled_while_waiting_is_not_retried(
    queue: Queue, store: Store, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its rows of forkq_dependencies went when it was cancelled: retried, it would run
    whatever its parents do. It is refused with the reason; a job without parents, and a
    dead child (it ran: its parents had ended), are retried as before."""
    parent = queue.enqueue("test.a", queue="work")
    child = queue.enqueue("test.b", queue="work", depends_on=[parent])
    plain = queue.enqueue("test.c", queue="other")
    assert store.cancel_jobs([child, plain], "test")[child].ok
    assert store.retry_jobs([child]) == 0
    assert status(store, child) == "cancelled"
    assert cli.main(["retry", str(child), "--database", db_url]) != 0
    assert "cancelled with parents" in capsys.readouterr().err
    assert store.retry_jobs([plain]) == 1
    assert status(store, plain) == "ready"
    late = queue.enqueue("test.d", queue="work", depends_on=[parent])
    assert store.complete(A, [r.id for r in store.claim("work", A, 1, LEASE)], "keep") == 1
    [row] = store.claim("work", A, 1, LEASE)
    assert row.id == late
    assert store.fail(A, late, "boom", dead=True)
    assert store.retry_jobs([late]) == 1
    assert status(store, late) == "ready"


def test_chain_and_group_refuse_uniqueness_options_with_the_reason(
    queue: Queue, store: Store
) -> None:
    """Uniqueness options on a q.job were dropped without a word; they are refused, as
    enqueue refuses depends_on with a unique_key, and nothing is written."""
    for options in (
        {"unique_for": 60, "on_conflict": "debounce"},
        {"unique_key": "k"},
        {"unique_while": "active"},
        {"on_conflict": "replace"},
        {"debounce_max": 5},
    ):
        with pytest.raises(UsageError, match="depends_on, which does not combine with unique_key"):
            queue.chain([queue.job("test.a"), queue.job("test.h", **options)])
        with pytest.raises(UsageError, match="depends_on, which does not combine with unique_key"):
            queue.group([queue.job("test.h", **options)])
    assert store.list_jobs() == []
    parent = queue.enqueue("test.a")
    with pytest.raises(UsageError, match="depends_on does not combine with unique_key"):
        queue.enqueue("test.b", unique_key="k", depends_on=[parent])
    assert len(queue.chain([queue.job("test.a", on_conflict="skip")])) == 1


def test_a_child_refused_dead_by_a_claim_under_limits_forgets_its_parents(
    queue: Queue, store: Store, db_url: str
) -> None:
    """A released child whose row no bucket can hold (another program's limit_key with a
    NUL) ends dead in the claim: its rows of forkq_dependencies go with it, as with any
    end, instead of staying in the table for good."""
    parent = queue.enqueue("m.send", queue="email")
    child = queue.enqueue("m.send", queue="email", depends_on=[parent], limit_key="tenant")
    sql(db_url, "UPDATE forkq_jobs SET limit_key = ? WHERE id = ?", ["bad\x00key", child])
    plan = LimitPlan([LimitConfig("mail", handlers=("m.send",), concurrency=5, per_key=True)], {})
    [row] = flow.complete_and_claim(store, plan, {}, "email", A, 10, LEASE)[0]
    assert row.id == parent
    assert count_rows(db_url, "forkq_dependencies") == 1
    flow.complete_and_claim(store, plan, {"keep": [parent]}, "email", A, 10, LEASE)
    assert [status(store, parent), status(store, child)] == ["done", "dead"]
    assert store.parents_of(child) == []
    assert count_rows(db_url, "forkq_dependencies") == 0


def old_daemon(db_url: str) -> Store:
    """A store that asked the schema version before `forkq schema apply` took it to 14, as
    a daemon started before the upgrade did (it asks once): it ends jobs the old way, with
    the one statement of schema 13 that settles no child. The version it keeps is set
    here; building a database at 13 and upgrading it under the store ends the same."""
    old = open_store(db_url)
    old.schema_checked = DEPS_SCHEMA_VERSION - 1
    return old


def test_the_chores_release_a_child_whose_parents_end_missed_it_exactly_once(
    queue: Queue, store: Store, db_url: str
) -> None:
    """A missed release (an old daemon in a rolling upgrade; two Galera writers whose row
    locks are not certified across nodes) leaves a child waiting with every parent done:
    one chores run releases it (once: the next finds nothing), and applies the failure
    rule of a parent that ended dead, transitively, as that parent's end would have."""
    first = queue.enqueue("test.a", queue="work")
    second = queue.enqueue("test.b", queue="work")
    doomed_parent = queue.enqueue("test.c", queue="work")
    child = queue.enqueue("test.d", queue="kids", depends_on=[first, second])
    doomed, after = queue.chain(
        [queue.job("test.e", queue="kids", depends_on=[doomed_parent]), queue.job("test.f")]
    )
    goes_on = queue.enqueue(
        "test.g", queue="kids", depends_on=[doomed_parent], on_parent_failure="continue"
    )
    still = queue.enqueue("test.h", queue="kids", depends_on=[first, after])
    old = old_daemon(db_url)
    try:
        assert old.complete(A, [r.id for r in old.claim("work", A, 2, LEASE)], "keep") == 2
        [row] = old.claim("work", A, 1, LEASE)
        assert old.fail(A, row.id, "boom", dead=True)
    finally:
        old.close()
    ids = [child, doomed, after, goes_on, still]
    assert [status(store, i) for i in ids] == ["waiting"] * 5  # missed by the old ends
    raw = {"database": {"url": db_url}, "pools": {"work": {}, "kids": {}}}
    chores = Chores(store, build_config(raw, "forkq.toml"))
    report = chores.run()
    assert report.leader and report.swept == 5
    assert [status(store, i) for i in ids] == [
        "ready",
        "cancelled",
        "cancelled",
        "ready",
        "cancelled",
    ]
    assert "parent job" in (store.get_job(doomed).last_error or "")  # type: ignore[union-attr]
    assert chores.run().swept == 0
    assert Chores(store, build_config(raw, "forkq.toml")).run().swept == 0  # from anywhere
    assert sorted(r.id for r in store.claim("kids", A, 10, LEASE)) == [child, goes_on]


def test_the_sweep_looks_at_a_bounded_window_and_walks_on(
    queue: Queue, store: Store, db_url: str
) -> None:
    """Each call reads at most `limit` rows of forkq_dependencies from where the last one
    stopped, wrapping to the start: every stuck child is reached in a few calls."""
    parent = queue.enqueue("test.a", queue="work")
    kids = [queue.enqueue("test.b", queue="kids", depends_on=[parent]) for _ in range(5)]
    old = old_daemon(db_url)
    try:
        assert old.complete(A, [r.id for r in old.claim("work", A, 1, LEASE)], "keep") == 1
    finally:
        old.close()
    assert store.sweep_waiting(kids[3], limit=2) == (2, kids[4] + 1)
    assert [status(store, k) for k in kids] == ["waiting"] * 3 + ["ready"] * 2
    assert store.sweep_waiting(kids[4] + 1, limit=2) == (2, kids[1] + 1)
    assert store.sweep_waiting(kids[1] + 1, limit=2) == (1, kids[3] + 1)  # rows live on
    assert [status(store, k) for k in kids] == ["ready"] * 5
