"""What an idle daemon's log says (issue 21.12): once the jobs are done, a check tick
every interval is no news at info level (it is at debug), and an alert with no channel
configured was sent nowhere, so no `alert_sent` line claims it was."""

from __future__ import annotations

from collections.abc import Callable

from daemon_util import Daemon, render_config
from util import wait_until

from supervisor import Queue, events
from supervisor.store import Store

RULES = "\n[alerts]\n\n[alerts.rules.stuck]\nmax_ready = 0\n"


def test_an_idle_daemon_logs_no_tick_pulse_and_no_alert_sent_nowhere(
    daemons: Callable[..., Daemon], queue: Queue, store: Store
) -> None:
    queue.enqueue("t.noop", {}, queue="stuck")  # no pool serves it: the alert fires
    daemon = daemons(name="quiet")
    daemon.command = [*daemon.command, "--debug"]  # the ticks are counted at debug
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + RULES)
    daemon.start().wait_ready()
    wait_until(
        lambda: store.load_alerts().get("max_ready:stuck"), timeout=30, message="alert saved"
    )
    daemon.wait_event(events.CHECK_TICK, timeout=30, count=6)  # check_interval 0.5 s
    ticks = daemon.events(events.CHECK_TICK)
    loud = [e for e in ticks if e.get("level") != "debug"]
    assert len(loud) == 1 and loud[0] == ticks[0], loud  # the first: who leads the chores
    assert not daemon.events(events.ALERT_SENT), daemon.events(events.ALERT_SENT)
    assert daemon.stop() == 0, daemon.describe()
