"""The store's side of kept results and the attempt history (store/results.py), both
backends: a kept value read once its holder completed the job; an expired lease
reaped into the history as `lease_expired`; the last 20 attempts kept, errors capped;
attempt rows pruned once their job has ended."""

from __future__ import annotations

import json

from store_util import LEASE, A, B, claim_one, put
from util import forkq_cli, wait_until

from supervisor.cluster.chores import reap_expired_leases
from supervisor.results import JobResult, read_result
from supervisor.store import Store
from supervisor.store.results import ATTEMPT_ERROR_CHARS, ATTEMPT_SLOTS, AttemptEnd


def test_a_kept_value_counts_once_its_job_is_completed_by_its_holder(store: Store) -> None:
    job_id = put(store)
    claim_one(store, A)
    store.keep_results([(job_id, "work", '{"x": 1}')])
    assert read_result(store, job_id) == JobResult(job_id, "running")  # the job row says
    assert store.complete(B, [job_id], "delete") == 0  # not B's
    assert read_result(store, job_id) == JobResult(job_id, "running")
    assert store.complete(A, [job_id], "delete") == 1
    assert store.get_job(job_id) is None  # deleted on success, its result kept
    assert read_result(store, job_id) == JobResult(job_id, "done", True, {"x": 1})
    other = put(store)
    claim_one(store, A)
    assert store.complete(A, [other], "delete") == 1
    assert read_result(store, other) == JobResult(other, "gone")


def test_an_expired_lease_goes_into_the_history_as_lease_expired(store: Store) -> None:
    job_id = put(store)
    claim_one(store, A, lease=0.2)
    wait_until(store.expired_leases, timeout=10, message="lease expiry")
    assert reap_expired_leases(store) == 1
    [row] = store.job_attempts(job_id)
    assert (row["attempt"], row["outcome"], row["host"], row["pid"]) == (
        1,
        "lease_expired",
        "host-a",
        101,
    )
    assert "lease expired" in row["error"]


def test_a_job_keeps_its_last_attempts_with_errors_capped(store: Store) -> None:
    job_id = put(store)
    for number in range(1, ATTEMPT_SLOTS + 6):
        store.record_attempt(AttemptEnd(job_id, number, "work", "retry", A, "x" * 5000, None))
    kept = store.job_attempts(job_id)
    assert sorted(r["attempt"] for r in kept) == list(range(6, ATTEMPT_SLOTS + 6))
    assert {len(r["error"]) for r in kept} == {ATTEMPT_ERROR_CHARS}


def test_attempt_rows_are_pruned_once_their_job_has_ended(store: Store) -> None:
    waiting = put(store)
    ended = put(store)
    for job_id in (waiting, ended):
        store.record_attempt(AttemptEnd(job_id, 1, "work", "retry", A, "boom", None))
    claim_one(store, A, lease=LEASE)  # the first job: it runs again
    [row] = store.claim("work", B, 1, LEASE)
    assert store.fail(B, row.id, "boom", dead=True)
    assert store.purge_attempts(0.0, "work") == 1
    assert len(store.job_attempts(waiting)) == 1 and store.job_attempts(ended) == []


def test_an_operators_retry_keeps_the_run_before_it_in_the_history(store: Store) -> None:
    """A retry numbers attempts from 1 again: the new run's attempts do not overwrite the
    last run's (which a later retry then drops, keeping two runs at most)."""
    job_id = put(store)

    def run(attempts: int, tag: str) -> None:
        for number in range(1, attempts + 1):
            store.record_attempt(
                AttemptEnd(job_id, number, "work", "retry", A, f"{tag}{number}", None)
            )

    def history() -> list[str]:
        return [str(r["error"]) for r in store.job_attempts(job_id)]

    run(4, "first-")
    assert store.retry_jobs([job_id]) == 1
    run(2, "second-")
    assert history() == ["first-1", "first-2", "first-3", "first-4", "second-1", "second-2"]
    assert store.retry_jobs([job_id]) == 1
    run(1, "third-")
    assert history() == ["second-1", "second-2", "third-1"]


def test_show_lists_the_failed_attempts_of_a_job_deleted_on_success(
    db_url: str, store: Store
) -> None:
    """Its row is gone (on_success = "delete") and its result kept: `forkq show` lists the
    attempts that failed before the success, as long as they are kept."""
    job_id = put(store)
    claim_one(store, A)
    store.record_attempt(AttemptEnd(job_id, 1, "work", "retry", A, "upstream said 503", None))
    store.keep_results([(job_id, "work", '{"sent": true}')])
    assert store.complete(A, [job_id], "delete") == 1 and store.get_job(job_id) is None
    shown = forkq_cli(db_url, "show", str(job_id), "--json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["result"]["value"] == {"sent": True}
    [attempt] = document["attempt_history"]
    assert (attempt["attempt"], attempt["outcome"]) == (1, "retry")
    assert attempt["error"] == "upstream said 503"
    text = forkq_cli(db_url, "show", str(job_id)).stdout
    assert "attempt history:" in text and "upstream said 503" in text
