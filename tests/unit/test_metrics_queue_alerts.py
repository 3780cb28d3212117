"""The queue rules' `forkq_alerts_firing` series through a database outage: no tick judges
them then (their figures are unknown), and they stay as last judged; they vanished, so a
Prometheus rule on `forkq_alerts_firing == 1` read the outage as resolved."""

from __future__ import annotations

from supervisor.observe.master_side import QueueAlerts


def test_queue_alerts_stay_as_last_judged_while_the_database_is_down() -> None:
    kept = QueueAlerts()
    judged = [("max_dead", "bad", True), ("max_ready", "mail", False), ("saturated", "w", True)]
    assert kept.kept(judged, down=False) == judged
    outage = [("db_unreachable", "", True), ("saturated", "w", True)]
    assert kept.kept(outage, down=True) == [*outage, judged[0], judged[1]]
    back = [("max_dead", "bad", False), ("db_unreachable", "", False)]
    assert kept.kept(back, down=False) == back  # judged again: as judged now
    assert kept.kept([("db_unreachable", "", True)], down=True) == [
        ("db_unreachable", "", True),
        ("max_dead", "bad", False),
    ]
