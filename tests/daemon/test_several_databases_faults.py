"""The supervisor of several databases when one of them misbehaves (review of issue 24).

A database that does not answer, or has no schema, must stop only its own queues: the
unit's READY and WATCHDOG go on for the others, and a HUP that removes (or brings back)
such a database while its master waits to be started again does what it says.
"""

# ruff: noqa: F811 (the fixtures imported from test_several_databases are parameters)

from __future__ import annotations

import contextlib
import glob
import os
import signal
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
from daemon_util import Daemon
from test_several_databases import (  # noqa: F401 (fixtures)
    Notify,
    config_text,
    empty_pair,
    masters,
    notify,
    pair,
    pool_workers,
    several,
    wait_serving,
)
from util import free_tcp_port, sqlite_url_for, wait_until

from supervisor import Queue


def test_a_database_without_schema_does_not_hold_back_ready(
    pair: tuple[str, str],
    several: Callable[..., Daemon],
    notify: Notify,
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

    def refused(event: dict[str, object]) -> bool:
        return event.get("database") == "gone"

    before = len(daemon.events("master_refused", database="gone"))
    daemon.wait_event("master_forked", count=forked + 1, where=refused)
    daemon.wait_event("master_refused", count=before + 1, where=refused)
    assert daemon.alive(), daemon.describe()
    # 78 when `gone` is refused once more as the stop comes (its exit code is kept).
    assert daemon.stop(timeout=30) in (0, 78)


SPOOF = '''\
import os
import socket

from supervisor import handler


@handler("m.spoof")
def spoof(payload, job):
    """Handler code (or a tool it runs) that speaks sd_notify from a worker."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.sendto(b"EXTEND_TIMEOUT_USEC=123456789", os.environ["NOTIFY_SOCKET"])
'''


def test_the_supervisor_hears_a_master_not_its_workers(
    pair: tuple[str, str],
    several: Callable[..., Daemon],
    notify: Notify,
    tmp_path: Path,
) -> None:
    home, other = pair
    path, heard = notify
    (tmp_path / "spoofing.py").write_text(SPOOF)
    text = config_text(home, {"other": (other, ["beta"])})
    text = text.replace(
        'handlers = ["severalhandlers"]', 'handlers = ["severalhandlers", "spoofing"]'
    )
    daemon = several(text, {"NOTIFY_SOCKET": path})
    heard(lambda m: "READY=1" in m)
    q = Queue(home, wake=False)
    q.enqueue("m.spoof", {}, queue="alpha")
    q.close()
    # The worker's datagram came before its master's status that counts the job done:
    # as systemd with NotifyAccess=main, the supervisor drops what a worker says.
    heard(lambda m: any("default: " in x and "1 job done" in x for x in m))
    assert "EXTEND_TIMEOUT_USEC=123456789" not in heard(bool)
    assert daemon.stop(timeout=30) == 0


def test_a_removed_databases_pools_leave_the_scrape(
    pair: tuple[str, str], several: Callable[..., Daemon]
) -> None:
    home, other = pair
    listen = f"127.0.0.1:{free_tcp_port()}"
    metrics = f'\n[metrics]\nlisten = "{listen}"\n'
    daemon = several(config_text(home, {"other": (other, ["beta"])}, metrics))

    def scrape() -> str:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"http://{listen}/metrics", timeout=5) as answer,
        ):
            return str(answer.read().decode())
        return ""

    beta = 'forkq_pool_max_workers{database="other",pool="beta"} 1.0'
    wait_until(lambda: beta in scrape(), timeout=30, message="beta's series")
    daemon.write_config(text=config_text(home, {}, metrics))
    daemon.send_signal(signal.SIGHUP)
    daemon.wait_event("master_exited", where=lambda e: e.get("database") == "other")

    # Its master is gone: no live figure of pool beta left, under `other` or (wrongly)
    # under `default` (its counters stay, as a pool's that a reload removes).
    alpha = 'forkq_pool_max_workers{database="default",pool="alpha"} 1.0'

    last = [""]  # the scrape that showed beta's gauges gone

    def ghosts() -> list[str]:
        last[0] = scrape()
        if alpha not in last[0]:  # a scrape that failed, or alpha's gauge not back: again
            return ["(no scrape with alpha's gauge)"]
        return [x for x in last[0].splitlines() if x.startswith("forkq_pool_") and "beta" in x]

    wait_until(lambda: not ghosts(), timeout=30, message="beta's gauges gone, alpha's shown")
    text = last[0]
    kept = [x for x in text.splitlines() if 'pool="beta"' in x and not x.startswith("#")]
    assert kept, "beta's counters (its children's exits) stay in the scrape"
    assert all('database="other"' in x for x in kept), kept  # where they were counted
    assert daemon.stop(timeout=30) == 0


def test_a_supervisor_killed_hard_leaves_nothing_behind_after_the_next_start(
    pair: tuple[str, str], several: Callable[..., Daemon]
) -> None:
    home, other = pair
    daemon = several(config_text(home, {"other": (other, ["beta"])}))
    first = wait_serving(daemon, {"default", "other"}, {"alpha", "beta"})
    sockets = os.path.join(tempfile.gettempdir(), f"forkq-notify-{daemon.pid}-*")
    assert glob.glob(sockets), "the masters' notify sockets"
    os.kill(daemon.pid, signal.SIGKILL)
    for pid in first.values():
        wait_until(lambda pid=pid: not psutil.pid_exists(pid), timeout=30, message="masters gone")
    assert daemon.wait_exit(30) == -signal.SIGKILL
    assert glob.glob(sockets), "a process killed -9 removes nothing"
    daemon.start()  # the next start sweeps what the killed supervisor left
    wait_serving(daemon, {"default", "other"}, {"alpha", "beta"})
    assert not glob.glob(sockets)
    assert daemon.stop(timeout=30) == 0


def test_a_reload_while_the_masters_boot_reaches_them(
    pair: tuple[str, str], several: Callable[..., Daemon]
) -> None:
    home, other = pair
    text = config_text(home, {"other": (other, ["beta"])})
    daemon = several(text)
    # HUP as soon as the masters are forked, before their own handlers are in.
    wait_until(lambda: len(masters(daemon)) == 2, timeout=30, interval=0.001, message="forked")
    daemon.write_config(text=text.replace("workers = 1", "workers = 2"))
    daemon.send_signal(signal.SIGHUP)
    wait_serving(daemon, {"default", "other"}, {"alpha", "beta"})

    two = {"alpha": 2, "beta": 2}
    wait_until(lambda: pool_workers(daemon) == two, timeout=30, message="2 workers a pool")
    assert daemon.stop(timeout=30) == 0


def test_a_resize_while_the_masters_boot_reaches_them(
    pair: tuple[str, str], several: Callable[..., Daemon]
) -> None:
    home, other = pair
    daemon = several(config_text(home, {"other": (other, ["beta"])}))
    # TTIN as soon as the masters are forked, before their own handlers are in.
    wait_until(lambda: len(masters(daemon)) == 2, timeout=30, interval=0.001, message="forked")
    daemon.send_signal(signal.SIGTTIN)
    wait_serving(daemon, {"default", "other"}, {"alpha", "beta"})
    two = {"alpha": 2, "beta": 2}
    wait_until(lambda: pool_workers(daemon) == two, timeout=30, message="2 workers a pool")
    assert daemon.stop(timeout=30) == 0
