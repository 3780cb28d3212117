"""Real processes racing on one database: each job claimed once, one row per unique key.

Children are forked (multiprocessing 'fork'), open their own connection after the fork,
and report through a multiprocessing queue; a Barrier makes them start together.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_module
from collections import Counter
from typing import Any

import pytest
from util import count_rows

from supervisor import Queue
from supervisor.building import build_job
from supervisor.store import Store, open_store

CTX = mp.get_context("fork")
DEADLINE = 60.0  # seconds a child may take before the test gives up on it


def run_children(target: Any, args_for: list[tuple[Any, ...]]) -> list[Any]:
    """Start one process per args tuple and return what each put on the results queue."""
    results: Any = CTX.Queue()
    barrier = CTX.Barrier(len(args_for))
    children = [CTX.Process(target=target, args=(barrier, results, *args)) for args in args_for]
    for child in children:
        child.start()
    try:
        outcomes = []
        for _ in children:
            try:
                outcomes.append(results.get(timeout=DEADLINE))
            except queue_module.Empty:
                pytest.fail("a child process reported nothing before the deadline")
        for child in children:
            child.join(timeout=DEADLINE)
            assert child.exitcode == 0, f"child {child.pid} exited with {child.exitcode}"
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
                child.join(timeout=5)
    errors = [outcome for outcome in outcomes if isinstance(outcome, str)]
    assert errors == [], errors
    return outcomes


def drain(barrier: Any, results: Any, url: str, owner: str) -> None:
    """Claim batches and complete them with delete until nothing is claimable."""
    store = open_store(url)
    claimed: list[int] = []
    try:
        barrier.wait(timeout=DEADLINE)
        while batch := store.claim("drain", owner, 25, lease=300):
            ids = [row.id for row in batch]
            claimed.extend(ids)
            if store.complete(owner, ids, "delete") != len(ids):
                raise AssertionError(f"{owner} could not complete jobs it had claimed: {ids}")
        results.put((owner, claimed))
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put(f"{owner}: {type(exc).__name__}: {exc}")
    finally:
        store.close()


@pytest.mark.slow
def test_four_processes_claim_each_of_2000_jobs_exactly_once(db_url: str, store: Store) -> None:
    enqueued = store.insert_many(
        [build_job("drain.job", {"n": n}, "drain", 0.0, None, 0, None, None) for n in range(2000)]
    )
    assert len(set(enqueued)) == 2000
    store.close()  # nothing open across the fork

    outcomes = run_children(drain, [(db_url, f"host:{n}:drain") for n in range(4)])

    per_owner = dict(outcomes)
    assert len(per_owner) == 4
    every_claim = Counter(job_id for ids in per_owner.values() for job_id in ids)
    assert [job_id for job_id, n in every_claim.items() if n > 1] == []  # nobody twice
    assert set(every_claim) == set(enqueued)  # nobody missed
    assert count_rows(db_url, "forkq_jobs") == 0


def enqueue_unique(barrier: Any, results: Any, url: str, n: int) -> None:
    queue = Queue(url)
    try:
        barrier.wait(timeout=DEADLINE)
        job_id = queue.enqueue("email.welcome", {"from_process": n}, unique_key="welcome-42")
        results.put((os.getpid(), job_id))
    except BaseException as exc:
        results.put(f"process {n}: {type(exc).__name__}: {exc}")
    finally:
        queue.close()


def test_eight_processes_enqueueing_one_unique_key_get_one_row(db_url: str) -> None:
    outcomes = run_children(enqueue_unique, [(db_url, n) for n in range(8)])

    ids = {job_id for _, job_id in outcomes}
    assert len(outcomes) == 8
    assert len(ids) == 1, f"processes got different ids: {sorted(ids)}"
    assert count_rows(db_url, "forkq_jobs") == 1
    assert (
        count_rows(db_url, "forkq_jobs", "id = ? AND unique_key = ?", (ids.pop(), "welcome-42"))
        == 1
    )
