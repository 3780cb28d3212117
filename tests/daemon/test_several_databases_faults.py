"""The supervisor of several databases when one of them misbehaves (review of issue 24).

A database that does not answer, or has no schema, must stop only its own queues: the
unit's READY and WATCHDOG go on for the others, and a HUP that removes (or brings back)
such a database while its master waits to be started again does what it says.
"""

# ruff: noqa: F811 (the fixtures imported from test_several_databases are parameters)

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from daemon_util import Daemon
from test_several_databases import config_text, masters, wait_serving
from test_several_databases import empty_pair, pair, several  # noqa: F401 (fixtures)
from util import free_tcp_port, sqlite_url_for, wait_until


@pytest.fixture
def notify() -> Iterator[tuple[str, Callable[[Callable[[list[str]], bool]], list[str]]]]:
    """A socket standing in for systemd's: its path, and `heard(until)` over what came."""
    directory = tempfile.mkdtemp(prefix="fq-notify-")
    path = os.path.join(directory, "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.5)
    messages: list[str] = []

    def heard(what: Callable[[list[str]], bool]) -> list[str]:
        def done() -> list[str] | None:
            with contextlib.suppress(TimeoutError):
                messages.extend(sock.recv(4096).decode().split("\n"))
            return messages if what(messages) else None

        return wait_until(done, timeout=40, interval=0, message=f"sd_notify: {messages!r}")

    yield path, heard
    sock.close()
    shutil.rmtree(directory, ignore_errors=True)


def test_a_database_down_at_boot_does_not_starve_the_units_watchdog(
    pair: tuple[str, str],
    several: Callable[..., Daemon],
    notify: tuple[str, Callable[[Callable[[list[str]], bool]], list[str]]],
) -> None:
    home, _ = pair
    path, heard = notify
    down = f"mysql://forkq:forkq@127.0.0.1:{free_tcp_port()}/nowhere"
    # WatchdogSec=1: systemd kills the unit after 1 s without WATCHDOG=1 past READY.
    daemon = several(
        config_text(home, {"other": (down, ["beta"])}),
        {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1000000"},
    )
    heard(lambda m: "READY=1" in m)
    # 12 pings at most every 0.5 s: 6 s and more, far past WatchdogSec, while `other`
    # keeps waiting for its database: systemd must not restart the healthy `default`.
    heard(lambda m: m[m.index("READY=1") :].count("WATCHDOG=1") >= 12)
    assert daemon.events("db_unreachable", database="other")
    assert daemon.stop(timeout=30) == 0


def test_a_database_without_schema_does_not_hold_back_ready(
    pair: tuple[str, str],
    several: Callable[..., Daemon],
    notify: tuple[str, Callable[[Callable[[list[str]], bool]], list[str]]],
    tmp_path: Path,
) -> None:
    home, _ = pair
    path, heard = notify
    bare = sqlite_url_for(tmp_path / "bare.db")  # no forkq tables: its master is refused
    daemon = several(config_text(home, {"bare": (bare, ["beta"])}), {"NOTIFY_SOCKET": path})
    daemon.wait_event("master_refused", where=lambda e: e.get("database") == "bare")
    # systemd's start would time out (and stop `default` with it) without READY.
    heard(lambda m: "READY=1" in m)
    assert "default" in masters(daemon)
    assert daemon.stop(timeout=30) == 0


def test_a_reload_that_removes_a_database_waiting_to_restart(
    pair: tuple[str, str], several: Callable[..., Daemon], tmp_path: Path
) -> None:
    home, _ = pair
    bare = [sqlite_url_for(tmp_path / f"bare{n}.db") for n in (1, 2)]  # both refused
    databases = {"gone": (bare[0], ["beta"]), "kept": (bare[1], ["gamma"])}
    daemon = several(config_text(home, databases))
    wait_serving(daemon, {"default"}, {"alpha"})

    def exits(name: str, at_least: float) -> list[dict[str, object]]:
        def long(event: dict[str, object]) -> bool:
            delay = event.get("restart_in")
            return (
                event.get("database") == name
                and isinstance(delay, float | int)
                and (delay >= at_least)
            )

        return daemon.wait_event("master_exited", timeout=40, where=long)

    exits("gone", 2)  # `gone` waits 2 s before its next start: remove it meanwhile
    daemon.write_config(text=config_text(home, {"kept": databases["kept"]}))
    daemon.send_signal(signal.SIGHUP)
    reloaded = daemon.wait_event("config_reloaded", where=lambda e: "stopped" in e)
    assert reloaded[0]["stopped"] == ["gone"], reloaded
    forked = len(daemon.events("master_forked", database="gone"))
    # `kept` failed with `gone`, in step: its wait of 8 s ends well after `gone`'s of 2 s.
    exits("kept", 8)
    assert daemon.alive(), daemon.describe()
    assert len(daemon.events("master_forked", database="gone")) == forked
    assert not daemon.events("master_crashed")

    # Brought back: it is started again.
    daemon.write_config(text=config_text(home, databases))
    daemon.send_signal(signal.SIGHUP)
    daemon.wait_event("config_reloaded", where=lambda e: "stopped" in e, count=2)
    daemon.wait_event("master_forked", count=forked + 1, where=lambda e: e["database"] == "gone")
    assert daemon.alive(), daemon.describe()
    assert daemon.stop(timeout=30) == 0
