"""The master's decisions at fixed times (supervisor/daemon/decisions.py): overtime,
retiring, which children to shed, and why a gone child's job is settled."""

from __future__ import annotations

import math

from supervisor.daemon.decisions import overtime_due, retire_deadline, settle_reason, to_retire
from supervisor.outcomes import SettleKind


def test_overtime_falls_due_at_the_deadline_plus_the_grace() -> None:
    assert not overtime_due(None, 10.0, 100.0, 3.0)  # between jobs: never
    assert not overtime_due(7, 10.0, 12.9, 3.0)
    assert overtime_due(7, 10.0, 13.0, 3.0)
    assert not overtime_due(7, math.inf, 1e12, 3.0)  # writing its outcome: no deadline


def test_a_retiring_child_gets_the_grace_or_its_jobs_kill_time_whichever_is_later() -> None:
    assert retire_deadline(100.0, 30.0, None) == 130.0
    assert retire_deadline(100.0, 30.0, 200.0) == 200.0
    assert retire_deadline(100.0, 30.0, 110.0) == 130.0


def test_the_idle_and_newest_children_are_shed_first() -> None:
    live = [(1, False, 10.0), (2, True, 5.0), (3, True, 20.0), (4, False, 30.0)]
    assert to_retire(live, 4) == []
    assert to_retire(live, 3) == [3]  # idle, newest
    assert to_retire(live, 1) == [3, 2, 4]  # then the other idle one, then the newest busy
    assert to_retire([], 0) == []


def reason(**given: object) -> object:
    facts: dict[str, object] = {
        "running": 5,
        "killed_job": None,
        "killed_timeout": 0.0,
        "killed_by_master": False,
        "stopping": False,
        "retire_reason": "",
        "exit_description": "killed by SIGSEGV",
    }
    facts.update(given)
    return settle_reason(**facts)  # type: ignore[arg-type]


def test_settle_reasons_name_their_kind_message_and_whether_the_attempt_counts() -> None:
    timed_out = reason(killed_job=5, killed_timeout=60.0)
    assert (timed_out.kind, timed_out.message, timed_out.counts_attempt) == (  # type: ignore[attr-defined]
        SettleKind.TIMED_OUT,
        "killed after 60s timeout",
        True,
    )
    shutdown = reason(killed_by_master=True, stopping=True)
    assert (shutdown.kind, shutdown.counts_attempt) == (SettleKind.SHUTDOWN, False)  # type: ignore[attr-defined]
    deaf = reason(killed_by_master=True, retire_reason="reload")
    assert deaf.kind == SettleKind.NOT_RETIRED and not deaf.counts_attempt  # type: ignore[attr-defined]
    assert deaf.message == "killed: did not exit when retired (reload)"  # type: ignore[attr-defined]
    died = reason()
    assert (died.kind, died.message, died.counts_attempt) == (  # type: ignore[attr-defined]
        SettleKind.DIED,
        "worker died (killed by SIGSEGV)",
        True,
    )
    # An overtime kill of another job than the one now running is no timeout of this one.
    assert reason(killed_job=4, killed_timeout=60.0).kind == SettleKind.DIED  # type: ignore[attr-defined]
