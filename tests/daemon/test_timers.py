"""The master's timers over half a real minute: one check tick per check_interval, and a HUP
that applies new intervals and the new chores lease at once.

Before the fix SIGALRM re-phased the check timer, so most boots ran two ticks per
interval, and HUP kept the boot-time intervals and lease. The counts here tell the two
apart by a factor of two, so a busy machine cannot make the test pass or fail wrongly.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_util import Daemon
from util import sql, wait_until

from supervisor import events

pytestmark = pytest.mark.slow

WINDOW = 16  # seconds counted at each interval: a double tick reads twice the ticks


@pytest.fixture
def daemon(tmp_path: Path, sqlite_db_url: str) -> Iterator[Daemon]:
    made = Daemon(
        tmp_path,
        sqlite_db_url,
        supervisor={"check_interval": 2, "chores_lease": 30},
    )
    made.command = [*made.command, "--debug"]  # a check_tick line per tick (at debug)
    yield made
    made.kill_all()


def ticks_between(daemon: Daemon, start: float, end: float) -> int:
    return sum(1 for e in daemon.events(events.CHECK_TICK) if start <= stamp(e) < end)


def stamp(event: dict[str, object]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def lease_left(db_url: str) -> float:
    """Seconds the chores lease has left (SQLite keeps epoch seconds)."""
    [(expires,)] = sql(db_url, "SELECT expires_at FROM forkq_locks WHERE name = 'forkq:chores'")
    return float(expires) - time.time()


def test_one_check_tick_per_interval_and_hup_applies_new_intervals_and_lease(
    daemon: Daemon, sqlite_db_url: str
) -> None:
    daemon.start().wait_ready()
    time.sleep(0.7)  # boot off the interval's phase, where the double tick showed
    start = time.time()
    time.sleep(WINDOW)
    first = ticks_between(daemon, start, time.time())
    assert 6 <= first <= 9, f"{first} ticks in {WINDOW} s at check_interval 2 (8 expected)"
    assert 20 < lease_left(sqlite_db_url) <= 30

    daemon.write_config(supervisor={"check_interval": 1, "chores_lease": 300})
    daemon.send_signal(signal.SIGHUP)
    daemon.wait_event(events.CONFIG_RELOADED, timeout=10)
    wait_until(
        lambda: lease_left(sqlite_db_url) > 200, timeout=10, message="the new chores lease taken"
    )
    start = time.time()
    time.sleep(WINDOW)
    second = ticks_between(daemon, start, time.time())
    assert 14 <= second <= 17, f"{second} ticks in {WINDOW} s at check_interval 1 (16 expected)"
    assert daemon.stop() == 0, daemon.describe()
