"""sd_notify without libsystemd, against a real AF_UNIX datagram socket; and the unit file."""

from __future__ import annotations

import os
import re
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.config import SupervisorConfig, load_config
from supervisor.daemon import systemd
from supervisor.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "forkq.service"
EXAMPLE_CONFIG = ROOT / "deploy" / "forkq.toml"


@pytest.fixture(params=["path", "abstract"])
def notify_socket(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[socket.socket]:
    """A bound datagram socket standing in for systemd, with $NOTIFY_SOCKET pointing at it."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.settimeout(5)
    if request.param == "path":
        path = tmp_path / "notify"
        assert len(str(path)) < 100, "AF_UNIX paths are limited to 108 bytes"
        server.bind(str(path))
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    else:
        name = f"forkq-test-{os.getpid()}-{uuid.uuid4().hex}"
        server.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    yield server
    server.close()


def receive(server: socket.socket) -> list[str]:
    """One datagram, split into its KEY=VALUE fields."""
    return server.recv(65536).decode().split("\n")


def test_each_notification_arrives_as_one_datagram(notify_socket: socket.socket) -> None:
    assert systemd.ready() is True
    assert receive(notify_socket) == ["READY=1"]
    assert systemd.status("3 pools, 5 workers") is True
    assert receive(notify_socket) == ["STATUS=3 pools, 5 workers"]
    assert systemd.watchdog() is True
    assert receive(notify_socket) == ["WATCHDOG=1"]
    assert systemd.stopping() is True
    assert receive(notify_socket) == ["STOPPING=1"]


def test_status_keeps_to_one_line(notify_socket: socket.socket) -> None:
    """A newline in the text would start a new field and could inject e.g. READY=1."""
    assert systemd.status("draining\nREADY=1")
    assert receive(notify_socket) == ["STATUS=draining READY=1"]


def test_reloading_sends_the_monotonic_time_systemd_253_wants(
    notify_socket: socket.socket,
) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert systemd.reloading() is True
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    fields = receive(notify_socket)
    assert fields[0] == "RELOADING=1"
    match = re.fullmatch(r"MONOTONIC_USEC=(\d+)", fields[1])
    assert match, fields
    assert before <= int(match.group(1)) <= after


def test_extend_timeout_is_in_microseconds(notify_socket: socket.socket) -> None:
    assert systemd.extend_timeout(2.5)
    assert receive(notify_socket) == ["EXTEND_TIMEOUT_USEC=2500000"]


def test_several_fields_share_one_datagram(notify_socket: socket.socket) -> None:
    assert systemd.notify("READY=1", "STATUS=up")
    assert receive(notify_socket) == ["READY=1", "STATUS=up"]


def test_a_forked_child_notifies_through_its_own_socket(notify_socket: socket.socket) -> None:
    """The socket is per pid: after a fork the child opens its own and still gets through,
    and systemd sees the child's pid (which NotifyAccess=main then ignores)."""
    notify_socket.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    assert systemd.watchdog()  # the parent's socket exists before the fork
    assert receive(notify_socket) == ["WATCHDOG=1"]
    inherited = systemd._sock
    assert inherited is not None
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 3
        try:
            sent = systemd.notify("STATUS=child")
            code = 1 if not sent else 2 if systemd._sock is inherited else 0
        finally:
            os._exit(code)
    assert wait_exit(pid, timeout=10) == 0, "1: not sent; 2: the inherited socket was reused"
    data, ancillary, _flags, _addr = notify_socket.recvmsg(4096, socket.CMSG_SPACE(12))
    assert data == b"STATUS=child"
    sender_pid = next(
        struct.unpack("iII", cdata)[0]
        for level, kind, cdata in ancillary
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS
    )
    assert sender_pid == pid
    assert systemd.ready()  # the parent's socket survived the child's exit
    assert notify_socket.recv(4096) == b"READY=1"


def wait_exit(pid: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"child {pid} did not exit within {timeout}s")


def test_outside_systemd_every_call_is_a_quiet_no(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert systemd.notify("READY=1") is False
    assert systemd.ready() is False
    assert systemd.stopping() is False
    assert systemd.reloading() is False
    assert systemd.status("x") is False
    assert systemd.watchdog() is False
    assert systemd.extend_timeout(1) is False


@pytest.mark.parametrize(
    "value",
    ["", "@", "relative/notify", "vsock:2:1234", "/nonexistent/dir/notify"],
)
def test_an_unusable_notify_socket_returns_false_without_raising(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", value)
    assert systemd.ready() is False
    assert systemd.status("still fine") is False


def test_a_socket_that_goes_away_is_survived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "notify"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    assert systemd.ready() is True
    server.close()
    path.unlink()
    assert systemd.watchdog() is False  # systemd restarted: no crash, just False
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.settimeout(5)
    server.bind(str(path))
    try:
        assert systemd.watchdog() is True
        assert server.recv(4096) == b"WATCHDOG=1"
    finally:
        server.close()


# --- watchdog_interval -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usec", "pid", "expected"),
    [
        ("30000000", None, 15.0),  # WatchdogSec=30 -> ping every 15 s
        ("30000000", "self", 15.0),
        ("1000000", "self", 0.5),
        ("30000000", "other", None),  # inherited by a process it was not meant for
        ("30000000", "junk", None),
        (None, None, None),  # no WatchdogSec=
        ("", None, None),
        ("0", None, None),
        ("-5", None, None),
        ("soon", None, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec_for_this_pid_only(
    monkeypatch: pytest.MonkeyPatch, usec: str | None, pid: str | None, expected: float | None
) -> None:
    for key, value in (("WATCHDOG_USEC", usec), ("WATCHDOG_PID", pid)):
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            real = {"self": str(os.getpid()), "other": str(os.getpid() + 1)}.get(value, value)
            monkeypatch.setenv(key, real)
    assert systemd.watchdog_interval() == expected


# --- deploy/forkq.service ------------------------------------------------------------------


def unit_settings() -> dict[str, list[str]]:
    """KEY -> every value it is given in the unit file (comments and sections skipped)."""
    settings: dict[str, list[str]] = {}
    for raw in UNIT.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def systemd_seconds(value: str) -> float:
    """A systemd time span such as 45, 45s, 1min 30s, 500ms, in seconds."""
    units = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0}
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    assert parts and "".join(n + u for n, u in parts) == value.replace(" ", ""), value
    return sum(float(number) * units[unit] for number, unit in parts)


def test_unit_is_type_notify_and_only_the_master_may_notify() -> None:
    settings = unit_settings()
    assert settings["Type"] == ["notify"]
    assert settings["NotifyAccess"] == ["main"]
    assert systemd_seconds(settings["WatchdogSec"][-1]) > 0


def test_unit_does_not_restart_on_a_config_error() -> None:
    settings = unit_settings()
    assert settings["Restart"] == ["on-failure"]
    prevented = " ".join(settings["RestartPreventExitStatus"]).split()
    assert str(int(ExitCode.CONFIG)) in prevented


def test_unit_sends_sigterm_to_the_master_only_and_reload_is_sighup() -> None:
    settings = unit_settings()
    assert settings["KillMode"] == ["mixed"]
    assert settings["KillSignal"] == ["SIGTERM"]
    assert settings["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


def test_unit_stop_timeout_outlasts_the_graceful_drain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Otherwise systemd SIGKILLs the master in the middle of letting jobs finish."""
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)
    stop_timeout = systemd_seconds(unit_settings()["TimeoutStopSec"][-1])
    example = load_config(EXAMPLE_CONFIG).supervisor.shutdown_timeout
    default = SupervisorConfig().shutdown_timeout  # what /etc/forkq/forkq.toml gets if unset
    assert stop_timeout > example
    assert stop_timeout > default


def test_unit_points_at_the_config_and_keeps_secrets_in_the_environment_file() -> None:
    settings = unit_settings()
    assert settings["ExecStart"] == ["/opt/forkq/.venv/bin/forkq run -c /etc/forkq/forkq.toml"]
    assert settings["EnvironmentFile"] == ["-/etc/forkq/forkq.env"]
    assert "MemoryDenyWriteExecute" not in settings
    assert settings["User"] == ["forkq"]


def test_env_example_names_exactly_the_variables_forkq_reads() -> None:
    lines = (ROOT / "deploy" / "forkq.env.example").read_text(encoding="utf-8").splitlines()
    keys = {line.split("=", 1)[0] for line in lines if line and not line.startswith("#")}
    assert keys == {"FORKQ_DATABASE_URL", "FORKQ_SMTP_PASSWORD"}
