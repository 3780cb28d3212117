"""HUP onto another database (`[database] url` changed in the file). The children forked
for the old database finish their jobs there, and what they leave is settled there, not
in the new one; then the master leaves the old database: no row of it is left there to
read as a stale process for ever, and its jobs do not stay `running` with nobody to end
them."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

from daemon_util import Daemon, record_ids, render_config
from databases_util import reports_url_fixture  # noqa: F401  (the `reports_url` fixture)
from util import wait_until

from supervisor import Queue, events
from supervisor.models import JobState
from supervisor.store import open_store


def process_names(url: str) -> set[str]:
    store = open_store(url)
    try:
        return {p.name for p in store.list_processes()}
    finally:
        store.close()


def test_a_reload_onto_another_database_settles_the_old_ones_children_there(
    daemons: Callable[..., Daemon], db_url: str, reports_url: str, tmp_path: Path
) -> None:
    daemon = daemons(pools={"work": {"workers": 1, "timeout": 2}}).start()
    daemon.wait_ready()
    old = Queue(db_url)
    stuck = old.enqueue("t.hang", queue="work", max_attempts=1)  # killed at its timeout
    wait_until(lambda: daemon.running(stuck), timeout=20, message="the hang started")
    [old_child] = daemon.pool_children("work")
    assert len(process_names(db_url)) == 2  # the master and its child

    daemon.write_config(text=render_config(reports_url, daemon.pools, daemon.supervisor))
    daemon.send_signal(signal.SIGHUP)
    daemon.wait_event(events.CONFIG_RELOADED)

    def ended() -> bool:
        row = old.get(stuck)
        return row is not None and row.status == JobState.DEAD

    wait_until(ended, timeout=30, message="the old database's job settled there")
    row = old.get(stuck)
    assert row is not None and "killed after 2s timeout" in (row.last_error or "")
    wait_until(
        lambda: process_names(db_url) == set(),
        timeout=20,
        message="the master and its old child gone from the old database",
    )
    record = tmp_path / "record.txt"
    moved = Queue(reports_url).enqueue("t.record", {"file": str(record)}, queue="work")
    wait_until(lambda: record_ids(record) == [moved], timeout=20, message="the new one's job")
    names = process_names(reports_url)
    assert len(names) == 2 and not any(name.endswith(f":{old_child}") for name in names)
    assert daemon.stop() == 0, daemon.describe()
    assert process_names(reports_url) == set() and process_names(db_url) == set()
