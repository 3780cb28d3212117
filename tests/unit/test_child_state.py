"""The master's record of one child (daemon/state.py): what the child told it (`phase`)
and what the master did to it (retiring, a two-stage kill, an immediate SIGKILL)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from supervisor.daemon.ledger import Ledger, LockFile
from supervisor.daemon.scoreboard import Scoreboard
from supervisor.daemon.state import Child, KillCause, Phase, Termination
from supervisor.work.sizing import ClaimSizing


@pytest.fixture
def child() -> Iterator[Child]:
    board, ledger = Scoreboard(), Ledger(LockFile())
    yield Child(pid=7, name="h:7:t", pool="q", slot=1, status_r=-1, wake_w=-1, started=0.0,
                board=board, ledger=ledger)  # fmt: skip
    board.close()
    ledger.close()


def test_a_new_child_has_not_reported_and_is_not_idle(child: Child) -> None:
    assert child.phase is Phase.STARTING and not child.reported
    assert not child.is_idle() and not child.retiring
    assert child.killed_job is None and child.cancelled_job is None and not child.sigkilled


def test_idle_since_is_when_it_first_said_idle_and_a_wake_makes_it_work(child: Child) -> None:
    child.on_message("I", 10.0)
    child.on_message("I", 12.0)  # still idle: the first time counts
    assert child.phase is Phase.IDLE and child.reported and child.is_idle()
    assert child.idle_since == 10.0
    child.woken()
    assert child.phase is Phase.WORKING and not child.is_idle()
    child.on_message("I", 20.0)
    assert child.idle_since == 20.0


def test_a_child_running_a_job_or_retiring_is_not_idle(child: Child) -> None:
    child.on_message("I", 1.0)
    child.board.write(5, 100.0, 0)
    assert not child.is_idle()  # its scoreboard says it runs a job
    child.board.write(None, 0.0, 1)
    assert child.is_idle()
    child.retire_by = 30.0
    assert child.retiring and not child.is_idle()


def test_a_leaving_child_keeps_its_first_reason_and_a_wake_does_not_revive_it(
    child: Child,
) -> None:
    child.on_message("R 16 0.0004 max_jobs reached (1000)", 1.0)
    child.on_message("R 2 0.0 memory", 2.0)
    assert child.phase is Phase.LEAVING and child.exit_reason == "max_jobs reached (1000)"
    assert child.sizing == ClaimSizing(2, 0.0)  # its last word on sizing
    child.woken()
    assert child.phase is Phase.LEAVING and child.reported


def test_a_garbled_retiring_line_keeps_no_sizing(child: Child) -> None:
    child.on_message("R max_jobs", 1.0)
    assert child.phase is Phase.LEAVING and child.sizing is None


def test_any_first_message_means_it_came_up(child: Child) -> None:
    child.on_message("?", 1.0)
    assert child.phase is Phase.WORKING and child.reported


def test_a_termination_names_the_job_by_its_cause(child: Child) -> None:
    child.ending = Termination(KillCause.OVERTIME, 41, kill_at=7.0, timeout=3.0)
    assert (child.killed_job, child.cancelled_job) == (41, None)
    child.ending = Termination(KillCause.CANCEL, 42, kill_at=5.5)
    assert (child.killed_job, child.cancelled_job) == (None, 42)
