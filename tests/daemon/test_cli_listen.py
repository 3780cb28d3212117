"""A port already taken (issue 21.17): `forkq web` says which address in one line (exit 1,
not "internal error"); a daemon whose `[metrics] listen` is taken says so in its log,
naming the address, and keeps running jobs while it tries again."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_util import failed, forkq_env, workdir_fixture  # noqa: F401  (the `workdir` fixture)
from daemon_util import Daemon, record_ids, render_config
from util import free_tcp_port, python, wait_until

from supervisor import Queue, events


@pytest.fixture
def taken() -> Iterator[str]:
    """HOST:PORT of a loopback port another process (this test) listens on."""
    sock = socket.create_server(("127.0.0.1", 0))
    yield f"127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_web_on_a_taken_port_names_the_address(
    workdir: Path, sqlite_db_url: str, taken: str
) -> None:
    result = subprocess.run(
        [python(), "-m", "supervisor", "web", "--listen", taken, "--database", sqlite_db_url],
        cwd=workdir,
        env=forkq_env(workdir, sqlite_db_url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = failed(result, 1)
    assert f"cannot listen on {taken}" in line and "internal error" not in line
    assert "in use" in line


def test_a_taken_metrics_port_is_a_log_line_naming_it_and_jobs_still_run(
    tmp_path: Path, sqlite_db_url: str, taken: str
) -> None:
    daemon = Daemon(tmp_path, sqlite_db_url)
    try:
        text = render_config(sqlite_db_url, daemon.pools, daemon.supervisor)
        daemon.write_config(text=f'{text}\n[metrics]\nlisten = "{taken}"\n')
        daemon.start().wait_ready()
        [event, *_] = daemon.wait_event(events.METRICS_LISTEN_FAILED)
        assert event["listen"] == taken and "in use" in event["error"]
        record = tmp_path / "record.txt"
        job_id = Queue(sqlite_db_url).enqueue("t.record", {"file": str(record)}, queue="work")
        wait_until(lambda: record_ids(record) == [job_id], timeout=20, message="the job ran")
        assert daemon.stop() == 0, daemon.describe()
    finally:
        daemon.kill_all()


@pytest.mark.parametrize("listen", ["192.0.2.1:{port}", "no-such-host.invalid:{port}"])
def test_a_metrics_address_that_can_never_be_bound_refuses_the_boot(
    tmp_path: Path, sqlite_db_url: str, listen: str
) -> None:
    """An address not this host's, a name that does not resolve: the daemon tried again
    forever, its log the only word, serving no /metrics nor /healthz. A config error (one
    line, exit 78) at boot, before any child; a port still taken is still tried again."""
    listen = listen.format(port=free_tcp_port())
    daemon = Daemon(tmp_path, sqlite_db_url)
    try:
        text = render_config(sqlite_db_url, daemon.pools, daemon.supervisor)
        daemon.write_config(text=f'{text}\n[metrics]\nlisten = "{listen}"\n')
        daemon.start()
        assert daemon.wait_exit(timeout=30) == 78, daemon.describe()
        assert f"[metrics] listen = '{listen}'" in daemon.stderr_text(), daemon.describe()
        assert daemon.events(events.CHILD_SPAWNED) == []
        assert daemon.events(events.MASTER_CRASHED) == []
    finally:
        daemon.kill_all()
