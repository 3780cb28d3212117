"""The pure decisions of supervisor/pools.py, with fixed numbers and fixed times.

The daemon tests can only watch a pool grow (SHRINK_IDLE_AFTER is a constant of the
master process); shrinking, back-off and the timers are checked here.
"""

from __future__ import annotations

import itertools

import pytest

from supervisor.daemon.decisions import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    JOBS_JITTER,
    SHRINK_IDLE_AFTER,
    STARTUP_WINDOW,
    PoolView,
    failed_at_startup,
    may_retry_db,
    plan_size,
    recycle_after,
    resized,
    respawn_delay,
)
from supervisor.daemon.timers import Periodic


def view(**fields: object) -> PoolView:
    base: dict[str, object] = {
        "minimum": 1,
        "maximum": 8,
        "target": 1,
        "live": 1,
        "idle": 0,
        "ready": None,
        "longest_idle": 0.0,
    }
    base.update(fields)
    return PoolView(**base)  # type: ignore[arg-type]


# --- growing -----------------------------------------------------------------------------


def test_pool_grows_in_doubling_steps_up_to_its_maximum() -> None:
    sizes = [1]
    for _ in range(5):  # each tick the children asked for last time are up and busy
        current = sizes[-1]
        sizes.append(plan_size(view(target=current, live=current, idle=0, ready=500)))
    assert sizes == [1, 2, 4, 8, 8, 8]


def test_growth_is_capped_at_maximum_not_overshot() -> None:
    assert plan_size(view(maximum=6, target=4, live=4, ready=500)) == 6


def test_growth_step_follows_the_children_actually_running() -> None:
    # target already 4 but only 1 child came up: the step is 1, not 4
    assert plan_size(view(target=4, live=1, ready=500)) == 5


def test_growth_is_limited_by_the_backlog() -> None:
    # 3 waiting, 1 idle child takes one: 2 more children, not a doubling to 8
    assert plan_size(view(target=4, live=4, idle=1, ready=3)) == 6


@pytest.mark.parametrize("ready", [None, 0])
def test_pool_does_not_grow_without_backlog(ready: int | None) -> None:
    assert plan_size(view(target=2, live=2, idle=0, ready=ready)) == 2


def test_pool_does_not_grow_when_idle_children_cover_the_backlog() -> None:
    assert plan_size(view(target=3, live=3, idle=2, ready=2)) == 3


def test_static_pool_never_grows() -> None:
    assert plan_size(view(minimum=2, maximum=2, target=2, live=2, ready=1000)) == 2


# --- shrinking ----------------------------------------------------------------------------


def test_pool_shrinks_by_one_after_shrink_idle_after() -> None:
    assert plan_size(view(target=5, live=5, idle=3, ready=0, longest_idle=SHRINK_IDLE_AFTER)) == 4
    assert (
        plan_size(view(target=5, live=5, idle=3, ready=None, longest_idle=SHRINK_IDLE_AFTER + 60))
        == 4
    )


def test_pool_does_not_shrink_before_shrink_idle_after() -> None:
    idle_for = SHRINK_IDLE_AFTER - 0.5
    assert plan_size(view(target=5, live=5, idle=3, ready=0, longest_idle=idle_for)) == 5


def test_pool_does_not_shrink_while_jobs_wait() -> None:
    long_idle = SHRINK_IDLE_AFTER * 2
    assert plan_size(view(target=5, live=5, idle=3, ready=1, longest_idle=long_idle)) == 5


def test_pool_keeps_its_size_while_the_database_does_not_answer() -> None:
    """An idle child may hold successes it could not write: retired, it would lose them
    (they would run again). Nor does a pool grow on a count it could not make."""
    long_idle = SHRINK_IDLE_AFTER * 2
    blind = view(target=5, live=5, idle=3, ready=None, longest_idle=long_idle, answered=False)
    assert plan_size(blind) == 5
    assert plan_size(view(target=2, live=2, ready=500, answered=False)) == 2


def test_pool_does_not_shrink_without_an_idle_child() -> None:
    long_idle = SHRINK_IDLE_AFTER * 2
    assert plan_size(view(target=5, live=5, idle=0, ready=0, longest_idle=long_idle)) == 5


def test_pool_never_shrinks_below_its_minimum() -> None:
    long_idle = SHRINK_IDLE_AFTER * 10
    assert (
        plan_size(view(minimum=2, target=2, live=2, idle=2, ready=0, longest_idle=long_idle)) == 2
    )


def test_shrinking_step_by_step_stops_at_the_minimum() -> None:
    size = 8
    sizes = []
    for _ in range(10):
        size = plan_size(
            view(
                minimum=3,
                target=size,
                live=size,
                idle=size,
                ready=0,
                longest_idle=SHRINK_IDLE_AFTER,
            )
        )
        sizes.append(size)
    assert sizes == [7, 6, 5, 4, 3, 3, 3, 3, 3, 3]


def test_target_outside_the_bounds_is_brought_back() -> None:
    # TTIN/TTOU move minimum and maximum; a stale target is clamped
    assert plan_size(view(minimum=3, maximum=8, target=1, live=1, ready=0)) == 3
    assert plan_size(view(minimum=1, maximum=4, target=6, live=6, ready=0)) == 4


def test_ttou_never_takes_a_pool_that_serves_below_a_maximum_of_one() -> None:
    """Two TTOUs took `workers = 1` to no child and a maximum of 0: its queue stalled,
    said by nothing. Now it idles at none and may start one (scale counts its backlog)."""
    assert resized(1, 1, 1, -1) == (0, 1, 0)
    assert resized(0, 1, 0, -1) == (0, 1, 0)
    assert resized(2, 4, 3, -1) == (1, 3, 2)
    assert resized(0, 0, 0, -1) == (0, 0, 0)  # max_workers = 0: a pool that serves nothing
    assert resized(0, 1, 0, +1) == (1, 2, 1)
    assert resized(3, 3, 3, +1) == (4, 4, 4)


def test_a_pool_with_no_child_grows_when_jobs_wait() -> None:
    """`workers = 0` with `max_workers` above it: the first job starts a child."""
    assert plan_size(view(minimum=0, maximum=2, target=0, live=0, ready=1)) == 1
    assert plan_size(view(minimum=0, maximum=2, target=0, live=0, ready=0)) == 0


# --- respawn back-off --------------------------------------------------------------------


def test_respawn_delay_is_zero_without_failures() -> None:
    assert respawn_delay(0) == 0.0


def test_respawn_delay_grows_and_caps() -> None:
    delays = [respawn_delay(n) for n in range(1, 12)]
    assert delays[0] == BACKOFF_FIRST == 0.5
    assert delays[:5] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert all(a <= b for a, b in itertools.pairwise(delays))
    assert max(delays) == BACKOFF_MAX == 60.0
    assert respawn_delay(1000) == BACKOFF_MAX


# --- start-up failures -------------------------------------------------------------------


def test_child_that_never_reported_failed_at_startup_however_long_it_lived() -> None:
    assert failed_at_startup(0.1, exit_ok=False, reported=False)
    assert failed_at_startup(STARTUP_WINDOW * 10, exit_ok=False, reported=False)


def test_child_that_died_with_an_error_right_after_starting_failed_at_startup() -> None:
    assert failed_at_startup(STARTUP_WINDOW / 2, exit_ok=False, reported=True)


def test_child_that_ran_a_while_did_not_fail_at_startup() -> None:
    assert not failed_at_startup(STARTUP_WINDOW + 1, exit_ok=False, reported=True)


def test_child_that_worked_and_was_then_killed_did_not_fail_at_startup() -> None:
    # A child that finished jobs came up fine, however soon it was killed (an operator,
    # the OOM killer, the chaos test): counting it would back respawns off up to a minute.
    assert not failed_at_startup(1.0, exit_ok=False, reported=True, jobs=16)
    assert failed_at_startup(1.0, exit_ok=False, reported=True, jobs=0)


def test_clean_exit_is_never_a_startup_failure() -> None:
    assert not failed_at_startup(0.01, exit_ok=True, reported=False)
    assert not failed_at_startup(0.01, exit_ok=True, reported=True)


# --- Periodic --------------------------------------------------------------------------------


def test_periodic_first_fires_one_interval_after_creation() -> None:
    timer = Periodic(10.0, now=100.0)
    assert not timer.due(105.0)
    assert timer.remaining(105.0) == 5.0
    assert timer.due(110.0)
    assert not timer.due(110.0)  # once per period
    assert timer.remaining(112.0) == 8.0


def test_periodic_with_first_zero_fires_at_once() -> None:
    timer = Periodic(10.0, now=100.0, first=0.0)
    assert timer.due(100.0)
    assert not timer.due(105.0)
    assert timer.due(110.0)


def test_periodic_skips_missed_periods_instead_of_firing_back_to_back() -> None:
    timer = Periodic(10.0, now=100.0)
    assert timer.due(155.0)  # periods at 110..150 were missed: one firing
    assert not timer.due(155.0)
    assert not timer.due(159.9)
    assert timer.next == 160.0  # the grid stays on the original phase
    assert timer.due(160.0)


def test_periodic_remaining_is_never_negative() -> None:
    timer = Periodic(1.0, now=0.0)
    assert timer.remaining(50.0) == 0.0


# --- retrying an unreachable database ----------------------------------------------------


def test_an_unreachable_database_is_retried_only_after_its_back_off() -> None:
    assert not may_retry_db(10.0, retry_at=10.5, stop_requested=False, next_kill=None, timeout=5)
    assert may_retry_db(10.5, retry_at=10.5, stop_requested=False, next_kill=None, timeout=5)


def test_an_unreachable_database_is_not_retried_once_a_stop_is_asked_for() -> None:
    assert not may_retry_db(99.0, retry_at=10.0, stop_requested=True, next_kill=None, timeout=5)


def test_an_unreachable_database_is_not_retried_when_a_kill_falls_due_within_a_timeout() -> None:
    # a silent server would hold the loop past the kill
    assert not may_retry_db(20.0, retry_at=10.0, stop_requested=False, next_kill=24.0, timeout=5)
    assert not may_retry_db(20.0, retry_at=10.0, stop_requested=False, next_kill=19.0, timeout=5)
    assert may_retry_db(20.0, retry_at=10.0, stop_requested=False, next_kill=25.5, timeout=5)


# --- recycling -----------------------------------------------------------------------------


def test_a_child_is_recycled_after_at_most_max_jobs_per_child_and_at_least_90_percent() -> None:
    assert recycle_after(1000, draw=0.0) == 1000
    assert recycle_after(1000, draw=0.5) == 950
    assert recycle_after(1000, draw=0.999) == 900
    assert JOBS_JITTER == 0.1
    assert recycle_after(1, draw=0.999) == 1  # never zero
