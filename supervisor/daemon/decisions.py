"""Pure decisions of the master, each a function of what it knows and `now`: pool
sizes, respawn back-off, recycling, overtime, retiring, settle reasons, database
retries. No os.*, no sockets; tested at fixed times.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.outcomes import SettleKind, SettleReason

SHRINK_IDLE_AFTER = 30.0  # seconds a child stays idle before a dynamic pool lets it go
STARTUP_WINDOW = 5.0  # a child that dies this soon after its start failed at start-up
BACKOFF_FIRST = 0.5  # seconds before respawning after the first start-up failure
BACKOFF_MAX = 60.0
CRASH_LOOP_AFTER = 3  # consecutive start-up failures that make a pool "crash-looping"
# Up to 10% fewer jobs per child, never more (the limit guards against leaks): children
# started together would otherwise all be recycled at once, and the pool would stop.
JOBS_JITTER = 0.1


@dataclass(frozen=True)
class PoolView:
    """What the master knows of one pool at a tick."""

    minimum: int  # `workers` (TTIN/TTOU move it)
    maximum: int  # `max_workers`
    target: int  # children it is keeping now
    live: int  # children running (not retiring)
    idle: int  # of which idle
    ready: int | None  # due jobs waiting, when it was counted this tick
    longest_idle: float  # seconds the longest-idle child has been idle
    answered: bool = True  # the database answers the master: else no size is judged


def plan_size(view: PoolView) -> int:
    """The next target size of a dynamic pool.

    Grow while due jobs outnumber idle children, doubling the step each tick like
    PHP-FPM's spawn rate (1, 2, 4, ...) up to `maximum`; shrink by one child per
    tick once a child has been idle for SHRINK_IDLE_AFTER and nothing waits. Neither while
    the database does not answer: what waits is unknown, and a child idle then may hold
    successes it could not write (a retired one would lose them: they would run again).
    """
    target = max(view.minimum, min(view.target, view.maximum))
    if not view.answered:
        return target
    if view.ready is not None and view.ready > view.idle and target < view.maximum:
        step = max(1, view.live)
        return min(view.maximum, target + min(step, view.ready - view.idle))
    if (
        target > view.minimum
        and not view.ready
        and view.idle > 0
        and view.longest_idle >= SHRINK_IDLE_AFTER
    ):
        return target - 1
    return target


def resized(minimum: int, maximum: int, target: int, delta: int) -> tuple[int, int, int]:
    """A pool's (minimum, maximum, target) after TTIN (+1) or TTOU (-1). TTOU stops at a
    maximum of one: a pool it takes to no children starts one when jobs wait (`scale`),
    where it stopped serving its queue, with nothing said. A pool configured with none
    (max_workers 0) stays so."""
    minimum = max(0, minimum + delta)
    if delta > 0:
        maximum = max(maximum + delta, minimum)
    else:
        maximum = max(minimum, maximum + delta, min(maximum, 1))
    return minimum, maximum, max(minimum, min(target + delta, maximum))


def respawn_delay(failures: int) -> float:
    """Back-off before the next spawn after `failures` consecutive start-up failures."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2.0 ** (failures - 1))


def failed_at_startup(lived: float, exit_ok: bool, reported: bool, jobs: int = 0) -> bool:
    """A child that died with an error before it took any job: it never reported in, or
    it did and died right after starting.

    `jobs` counts the jobs it took on, the one it was running when it died included. A
    child that took a job came up: what killed it (a segfault in a C extension, an OOM
    kill, an overtime kill) is the job's doing, and the job pays with its attempt. It
    must not push its pool into crash-loop back-off, which would hold every good job
    behind a few poison ones.
    """
    return not exit_ok and not came_up(lived, reported, jobs)


def came_up(lived: float, reported: bool, jobs: int) -> bool:
    """A child started: it took a job, or it reported in and lived past the start-up
    window. One that has, alive or not, ends its pool's crash loop."""
    return jobs > 0 or (reported and lived >= STARTUP_WINDOW)


def retire_deadline(now: float, grace: float, job_ends_by: float | None) -> float:
    """When a child asked to retire must be gone: after `grace`, or once the job it runs
    is past its own overtime kill, whichever is later. A child that ignores SIGTERM (a
    handler replaced the handler) would otherwise keep claiming jobs for ever beside its
    replacement."""
    return max(now + grace, job_ends_by or 0.0)


def may_retry_db(
    now: float, retry_at: float, stop_requested: bool, next_kill: float | None, timeout: float
) -> bool:
    """Whether the master tries an unreachable database again now.

    A try against a silent server blocks the loop for `timeout`: not before the back-off
    time, not while a stop waits, and not when a kill of an overtime child falls due
    within it (kills are decided locally and must not wait for the database).
    """
    if now < retry_at or stop_requested:
        return False
    return next_kill is None or next_kill - now > timeout


def recycle_after(max_jobs_per_child: int, draw: float) -> int:
    """A child's own job limit: `draw` (uniform in [0, 1)) takes up to JOBS_JITTER off."""
    return max(1, round(max_jobs_per_child * (1 - JOBS_JITTER * draw)))


def handback_due(started: float, now: float, grace: float) -> bool:
    """The job a child started at `started` has run past the grace: what the child holds
    behind it (jobs it has not started, successes it has not written) goes back."""
    return now - started >= grace


def overtime_due(job_id: int | None, deadline: float, now: float, grace: float) -> bool:
    """A job past its timeout plus the child's own soft-timeout grace: kill its child."""
    return job_id is not None and now >= deadline + grace


def settle_reason(
    *,
    running: int | None,
    killed_job: int | None,
    killed_timeout: float,
    killed_by_master: bool,
    stopping: bool,
    retire_reason: str,
    exit_description: str,
) -> SettleReason:
    """Why a gone child's running job is settled, and so whether its attempt counts."""
    if killed_job is not None and running == killed_job:
        return SettleReason(SettleKind.TIMED_OUT, f"killed after {killed_timeout:g}s timeout")
    if killed_by_master and stopping:
        return SettleReason(SettleKind.SHUTDOWN, "killed at shutdown")
    if killed_by_master:
        message = f"killed: did not exit when retired ({retire_reason})"
        return SettleReason(SettleKind.NOT_RETIRED, message)
    return SettleReason(SettleKind.DIED, f"worker died ({exit_description})")


def counts_held(reason: SettleReason, running: int | None, jobs: int) -> bool:
    """Whether the jobs a gone child held and was not running count an attempt: only
    when it died (nobody killed it) between jobs before its second one. A claim that dies
    on a row it cannot read never reports the job, and a child that dies ending its job
    (writing what it returned) has left it: without this that job went back uncounted
    and killed every child that took it, for ever, running its handler each time. A
    fresh child claims one job first (the claim size starts at 1), so what it holds is
    most often the job it died of."""
    return reason.kind is SettleKind.DIED and running is None and jobs <= 1


def to_retire(live: list[tuple[int, bool, float]], target: int) -> list[int]:
    """Which of a pool's live children (pid, idle, started) to retire to reach `target`:
    the idle first, the newest first."""
    excess = len(live) - target
    if excess <= 0:
        return []
    ordered = sorted(live, key=lambda c: (not c[1], -c[2]))
    return [pid for pid, _, _ in ordered[:excess]]
