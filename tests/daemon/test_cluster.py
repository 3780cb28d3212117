"""Two real daemons on one database: one alert per cooldown, one "resolved", and each
schedule slot enqueued once (both backends)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from daemon_util import Daemon, daemons_fixture, render_config  # noqa: F401  (the `daemons` fixture)
from private_mariadb import Webhook
from util import count_rows, wait_until

from supervisor import Queue, events
from supervisor.store import Store

Factory = Callable[..., Daemon]


def holds(predicate: Callable[[], bool], duration: float, message: str) -> None:
    """Assert `predicate` stays true for `duration` seconds (a stability check, polled)."""
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        assert predicate(), message
        time.sleep(0.1)


def start_pair(daemons: Factory, extra: str) -> list[Daemon]:
    pair = []
    for name in ("app1", "app2"):
        daemon = daemons(name=name, pools={"work": {"workers": 1}})
        daemon.write_config(
            text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + extra
        )
        pair.append(daemon.start())
    for daemon in pair:
        daemon.wait_ready()
    return pair


def test_two_daemons_send_one_alert_per_cooldown_and_one_resolved(
    daemons: Factory, queue: Queue, store: Store
) -> None:
    hook = Webhook()
    try:
        extra = f"""
[alerts]
webhook_url = "{hook.url}"
cooldown = "1h"

[alerts.rules.stuck]
max_ready = 1
"""
        # No pool serves "stuck": its backlog stays until we cancel it.
        ids = [queue.enqueue("t.noop", {}, queue="stuck") for _ in range(5)]
        pair = start_pair(daemons, extra)
        wait_until(
            lambda: any('queue "stuck" backlog' in t for t in hook.texts),
            timeout=20,
            message="no backlog alert",
        )
        holds(lambda: len(hook.texts) == 1, 4.0, f"more than one alert: {hook.texts}")
        fired = [t for t in hook.texts if 'queue "stuck" backlog 5 ready &gt; max_ready 1' in t]
        assert len(fired) == 1, hook.texts

        assert all(r.ok for r in store.cancel_jobs(ids, by="the test").values())
        wait_until(
            lambda: any("resolved" in t for t in hook.texts), timeout=20, message="no resolved"
        )
        holds(lambda: len(hook.texts) == 2, 4.0, f"more than one resolved: {hook.texts}")
        assert "resolved" in hook.texts[1] and 'queue "stuck"' in hook.texts[1]
        assert all(d.alive() for d in pair)
    finally:
        hook.close()


def test_two_daemons_enqueue_each_schedule_slot_once(
    daemons: Factory, db_url: str, store: Store
) -> None:
    extra = """
[schedules.tick]
cron = "* * * * * */2"   # croniter's sixth field: every 2 seconds
handler = "t.noop"
queue = "work"
"""
    pair = start_pair(daemons, extra)
    wait_until(
        lambda: count_rows(db_url, "forkq_schedule_slots") >= 4,
        timeout=30,
        message="fewer than 4 slots enqueued",
    )
    for daemon in pair:
        daemon.stop()
    enqueued = [e for d in pair for e in d.events(events.SCHEDULE_ENQUEUED)]
    slots = [e["slot"] for e in enqueued]
    assert len(slots) == len(set(slots)), f"a slot was enqueued twice: {sorted(slots)}"
    assert len(slots) == count_rows(db_url, "forkq_schedule_slots")
    # Every slot's job ran (pool "work" deletes done jobs): nothing left behind.
    assert count_rows(db_url, "forkq_jobs") == 0


def test_an_unreachable_webhook_does_not_stop_jobs(
    daemons: Factory, queue: Queue, db_url: str, tmp_path: Path
) -> None:
    import socket

    silent = socket.socket()  # accepts connections (backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/hook"
        extra = f"""
[alerts]
webhook_url = "{url}"
webhook_timeout = "1s"

[alerts.rules.stuck]
max_ready = 0
"""
        queue.enqueue("t.noop", {}, queue="stuck")  # keeps an alert firing and failing to send
        daemon = daemons(name="solo", pools={"work": {"workers": 2}})
        daemon.write_config(
            text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + extra
        )
        daemon.start().wait_ready()
        daemon.wait_event(events.ALERT_SEND_FAILED, timeout=20)
        ids = [queue.enqueue("t.noop", {}, queue="work") for _ in range(200)]
        wait_until(
            lambda: count_rows(db_url, "forkq_jobs", "queue = 'work'") == 0,
            timeout=30,
            message="jobs stopped flowing while the webhook hangs",
        )
        assert len(ids) == 200 and daemon.alive()
    finally:
        silent.close()


def test_a_pool_saturated_at_max_workers_raises_its_alert(
    daemons: Factory, queue: Queue, db_url: str
) -> None:
    hook = Webhook()
    try:
        extra = f"""
[alerts]
webhook_url = "{hook.url}"
cooldown = "1h"

[alerts.rules.work]
saturated_ticks = 2
"""
        daemon = daemons(name="busy", pools={"work": {"workers": 1, "max_workers": 1}})
        daemon.write_config(
            text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + extra
        )
        daemon.start().wait_ready()
        for _ in range(20):
            queue.enqueue("t.sleep", {"seconds": 0.5}, queue="work")
        wait_until(
            lambda: any('pool "work" saturated' in t for t in hook.texts),
            timeout=20,
            message=f"no saturation alert: {hook.texts}",
        )
        assert daemon.alive()
    finally:
        hook.close()


def forkq_schedule(daemon: Daemon, *args: str) -> None:
    """`forkq schedule ARGS` with the daemon's config, as an operator runs it."""
    command = [*daemon.command, "schedule", *args, "-c", str(daemon.config_path)]
    subprocess.run(command, env=daemon.environment(), check=True, timeout=60)


def test_a_schedule_added_at_runtime_fires_once_per_slot_across_two_daemons(
    daemons: Factory, db_url: str
) -> None:
    pair = start_pair(daemons, "")

    def schedule(*args: str) -> None:
        forkq_schedule(pair[0], *args)

    # Added while both run: whichever holds the chores lease enqueues it from then on.
    schedule("add", "rt", "--cron", "* * * * * */2", "--handler", "t.noop", "--queue", "work")
    wait_until(
        lambda: count_rows(db_url, "forkq_schedule_slots") >= 4,
        timeout=30,
        message="fewer than 4 slots of the runtime schedule enqueued",
    )
    schedule("pause", "rt")
    # A tick that read the schedule before the pause may still enqueue one more slot.
    time.sleep(2.5)
    paused_at = count_rows(db_url, "forkq_schedule_slots")
    holds(
        lambda: count_rows(db_url, "forkq_schedule_slots") == paused_at,
        4.0,
        "a paused schedule enqueued a slot",
    )
    for daemon in pair:
        daemon.stop()
    events = [e for d in pair for e in d.events("schedule_enqueued")]
    slots = [e["slot"] for e in events]
    assert {e["schedule"] for e in events} == {"rt"}
    assert len(slots) == len(set(slots)), f"a slot was enqueued twice: {sorted(slots)}"
    assert len(slots) == count_rows(db_url, "forkq_schedule_slots")
    assert count_rows(db_url, "forkq_jobs") == 0  # every slot's job ran


def test_a_runtime_schedule_runs_each_slot_once_while_the_chores_leader_changes(
    daemons: Factory, db_url: str
) -> None:
    pair = start_pair(daemons, "")
    forkq_schedule(pair[1], "add", "rt", "--cron", "* * * * * */2", "--handler", "t.noop")
    wait_until(
        lambda: count_rows(db_url, "forkq_schedule_slots") >= 2,
        timeout=30,
        message="no slot of the runtime schedule",
    )
    # Only the holder of the chores lease enqueues: stop it, and the other takes over.
    leader = next(d for d in pair if d.events("schedule_enqueued"))
    other = pair[1] if leader is pair[0] else pair[0]
    leader.stop()
    before = count_rows(db_url, "forkq_schedule_slots")
    wait_until(
        lambda: len(other.events("schedule_enqueued")) >= 3,
        timeout=30,
        message="the other daemon did not take the schedule over",
    )
    other.stop()
    events = [e for d in pair for e in d.events("schedule_enqueued")]
    slots = [e["slot"] for e in events]
    assert len(slots) == len(set(slots)), f"a slot was enqueued twice: {sorted(slots)}"
    assert len(slots) == count_rows(db_url, "forkq_schedule_slots") > before
