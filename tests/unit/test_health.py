"""/healthz's decision at fixed times: the master loop within 5 s, the database answered
at the last check, and that check is recent; every reason that applies is named."""

from __future__ import annotations

from supervisor.observe.health import LOOP_STALE_AFTER, Seen, judge

NOW = 10_000.0


def seen(**changes: object) -> Seen:
    fields: dict[str, object] = {
        "loop_at": NOW - 0.4,
        "checked_at": NOW - 3.0,
        "db_error": None,
        "check_stale_after": 70.0,
    }
    fields.update(changes)
    return Seen(**fields)  # type: ignore[arg-type]


def test_a_turning_loop_and_an_answering_database_are_healthy() -> None:
    health = judge(seen(), NOW)
    assert (health.ok, health.status) == (True, 200)
    assert health.reason.startswith("ok:")


def test_the_loop_may_be_five_seconds_old_and_no_more() -> None:
    assert judge(seen(loop_at=NOW - LOOP_STALE_AFTER), NOW).ok
    late = judge(seen(loop_at=NOW - LOOP_STALE_AFTER - 0.1), NOW)
    assert late.status == 503
    assert "master loop last turned 5.1 s ago" in late.reason


def test_a_loop_that_never_turned_is_unhealthy() -> None:
    health = judge(seen(loop_at=None), NOW)
    assert health.status == 503
    assert "has not started" in health.reason


def test_a_database_error_at_the_last_check_is_unhealthy_and_quoted() -> None:
    health = judge(seen(db_error="Can't connect to MySQL server on '10.0.0.5'\n(timed out)"), NOW)
    assert health.status == 503
    assert "did not answer at the last check: Can't connect" in health.reason
    assert "\n" not in health.reason  # one line, whatever the driver's message holds


def test_a_check_older_than_its_limit_says_nothing_about_the_database() -> None:
    assert judge(seen(checked_at=NOW - 70.0), NOW).ok
    health = judge(seen(checked_at=NOW - 71.0), NOW)
    assert health.status == 503
    assert "last database check is 71 s old (limit 70 s)" in health.reason


def test_no_check_yet_is_unhealthy() -> None:
    assert judge(seen(checked_at=None), NOW).status == 503


def test_every_reason_is_named_at_once() -> None:
    health = judge(seen(loop_at=NOW - 60, db_error="gone away"), NOW)
    assert health.status == 503
    assert "master loop" in health.reason and "gone away" in health.reason
