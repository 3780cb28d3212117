"""The check tick's report carries what the metrics export: the queue figures (chores
holder only) and the alerts this host may speak for, through the pipe's JSON line."""

from __future__ import annotations

from supervisor.cluster.alerts.states import FIRING, OK, AlertState
from supervisor.cluster.tick import TickReport, alert_labels
from supervisor.models import QueueStats

STATES = {
    "max_ready:work": AlertState(FIRING),
    "max_age:work": AlertState(OK),
    "saturated:alpha:work": AlertState(FIRING),
    "crash_loop:beta:mail": AlertState(FIRING),  # another host's: never ours to export
    "db_unreachable:alpha": AlertState(OK),
}


def test_the_holder_speaks_for_queue_rules_and_every_host_for_its_own() -> None:
    assert alert_labels(STATES, "alpha", leader=True) == [
        ["db_unreachable", "", False],
        ["max_age", "work", False],
        ["max_ready", "work", True],
        ["saturated", "work", True],
    ]
    assert alert_labels(STATES, "alpha", leader=False) == [
        ["db_unreachable", "", False],
        ["saturated", "work", True],
    ]
    assert alert_labels(STATES, "beta", leader=False) == [["crash_loop", "mail", True]]


def test_queue_figures_and_alerts_survive_the_pipe() -> None:
    figures = QueueStats("work", ready=3, dead=2, oldest_ready_age=4.5, capped=frozenset({"dead"}))
    report = TickReport(
        leader=True, queues=[figures.as_dict()], alerts=[["max_ready", "work", True]]
    )
    decoded = TickReport.decode(report.encode())
    assert decoded.queues == [figures.as_dict()]
    assert decoded.alerts == [["max_ready", "work", True]]
    assert TickReport.decode(TickReport().encode()).queues is None  # not the holder


def test_the_sweep_of_dependencies_goes_on_where_the_last_tick_stopped() -> None:
    """Each tick is a new process: where the chores' sweep stopped crosses the pipe."""
    assert TickReport.decode(TickReport(sweep_from=4501).encode()).sweep_from == 4501
    assert TickReport.decode(TickReport().encode()).sweep_from is None
