"""Whether the daemon is healthy: a pure decision from what the master last published.

Healthy means the master's loop turned within LOOP_STALE_AFTER seconds (it turns at
least once a second, so a stalled loop is a stopped, hung or starved master), the
database answered the master within two check intervals (at least DB_STALE_FLOOR s:
the master calls it at every heartbeat, and its breaker opens on the first call that
gets no answer), and it answered at the last check tick, which is itself recent: a
tick that stopped reporting proves nothing about the database any more.
"""

from __future__ import annotations

from dataclasses import dataclass

LOOP_STALE_AFTER = 5.0  # seconds (SPEC: /healthz is 503 once the loop has not turned for 5 s)
DB_STALE_FLOOR = 5.0  # seconds: the least `db_limit` (SPEC: two check intervals, at least 5 s)


def db_limit(check_interval: float) -> float:
    """Seconds the database may leave the master unanswered before /healthz says 503."""
    return max(DB_STALE_FLOOR, 2 * check_interval)


@dataclass(frozen=True)
class Health:
    ok: bool
    reason: str  # one line: why 503, or what was seen when 200

    @property
    def status(self) -> int:
        return 200 if self.ok else 503


@dataclass(frozen=True)
class Seen:
    """The inputs, all on the monotonic clock (CLOCK_MONOTONIC is system-wide, so the
    master's readings and the server's `now` compare)."""

    loop_at: float | None  # the master loop's last turn; None: not turned yet
    checked_at: float | None  # the last check's result; None: none yet
    db_error: str | None  # the last check's database error; None: it answered
    check_stale_after: float  # a check older than this says nothing any more
    db_answered_at: float = 0.0  # the master's last answered call; 0.0: not known
    db_limit: float = DB_STALE_FLOOR
    db_out: bool = False  # the master's breaker is open: its last call got no answer


def judge(seen: Seen, now: float) -> Health:
    """200 or 503 with every reason that applies, joined on one line."""
    problems: list[str] = []
    if seen.loop_at is None:
        problems.append("the master loop has not started")
    elif now - seen.loop_at > LOOP_STALE_AFTER:
        problems.append(
            f"the master loop last turned {now - seen.loop_at:.1f} s ago"
            f" (limit {LOOP_STALE_AFTER:g} s)"
        )
    silent = now - seen.db_answered_at
    if seen.db_out and seen.db_answered_at > 0 and silent > seen.db_limit:
        problems.append(
            f"the database has not answered the master for {silent:.1f} s"
            f" (limit {seen.db_limit:g} s)"
        )
    if seen.checked_at is None:
        problems.append("no database check yet")
    elif now - seen.checked_at > seen.check_stale_after:
        problems.append(
            f"the last database check is {now - seen.checked_at:.0f} s old"
            f" (limit {seen.check_stale_after:.0f} s)"
        )
    if seen.db_error is not None:
        error = " ".join(seen.db_error.split())[:300]
        problems.append(f"the database did not answer at the last check: {error}")
    if problems:
        return Health(False, "; ".join(problems))
    assert seen.loop_at is not None and seen.checked_at is not None
    return Health(
        True,
        f"ok: the master loop turned {now - seen.loop_at:.1f} s ago,"
        f" the database answered {now - seen.checked_at:.1f} s ago",
    )
