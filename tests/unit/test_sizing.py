"""A worker's claim size (work/sizing.py): slow start while jobs are quick, one job after
slow ones, two after idling, and what a retiring child tells the master of it."""

from __future__ import annotations

import pytest

from supervisor.work.sizing import BATCH_BUDGET, MOST_HELD, QUICK_JOB, ClaimSizing


def test_quick_batches_double_the_claim_up_to_claim_batch() -> None:
    sizing = ClaimSizing()
    sizes = []
    for _ in range(9):
        sizes.append(sizing.size(100))
        sizing.after_batch(mean=0.0001, typical=0.0001)
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 100, 100]


def test_a_claim_holds_about_the_budget_of_work() -> None:
    sizing = ClaimSizing(batch=64)
    sizing.after_batch(mean=BATCH_BUDGET / 10, typical=BATCH_BUDGET / 10)
    assert sizing.size(100) == 10


def test_a_slow_batch_claims_one_and_a_slow_outlier_does_not() -> None:
    sizing = ClaimSizing(batch=32)
    sizing.after_batch(mean=0.5, typical=0.0001)  # one slow job among quick ones
    assert sizing.batch == 64
    sizing.after_batch(mean=QUICK_JOB * 2, typical=QUICK_JOB * 2)
    assert sizing.size(100) == 1


def test_idling_starts_again_at_two() -> None:
    sizing = ClaimSizing(batch=128, job_time=0.0001)
    sizing.after_idle()
    assert sizing.size(100) == 2


def test_what_a_retiring_child_says_is_heard_as_it_was() -> None:
    sizing = ClaimSizing(batch=37, job_time=0.000123456789)
    assert ClaimSizing.heard(sizing.said()) == sizing


@pytest.mark.parametrize(
    "text", ["", "16", "x 0.1", "16 x", "0 0.1", f"{MOST_HELD + 1} 0.1", "4 -1", "4 nan", "4 inf"]
)
def test_anything_else_is_not_trusted(text: str) -> None:
    assert ClaimSizing.heard(text) is None
