"""The PHP producer with the daemon (clients/php, driven by Debian's real php-cli through
php_util.py): a job enqueued from PHP is run by the real Python daemon, a job due now
nudges the local daemons of its database on a real socket, and the command-handler
example (handlers/php/send_report.php) keeps the exit-code contract. What PHP's enqueue
stores: tests/store/test_php_client.py.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from daemon_util import (
    Daemon,
    daemons_fixture,  # noqa: F401  (the `daemons` fixture)
    record_ids,
)
from php_util import (
    HANDLER_EXAMPLE,
    Php,
    jobs,
    php_binary,
    php_fixture,  # noqa: F401  (the `php` fixture)
    php_string,
    run_php_fixture,  # noqa: F401  (the `run_php` fixture)
)
from util import count_rows, wait_until

from supervisor.dburl import parse_database_url
from supervisor.wake import ENV_RUNTIME_DIR, ENV_WAKE, database_identity, database_key

# --- with the daemon ---------------------------------------------------------------------------


def test_a_job_enqueued_from_php_is_run_by_the_python_daemon(
    daemons: Callable[..., Daemon], run_php: Php, db_url: str, tmp_path: Path
) -> None:
    daemon = daemons(pools={"work": {"workers": 1}}).start().wait_ready()
    record = tmp_path / "record.txt"
    [before, now_id, later_id] = run_php(
        f"""$file = {php_string(str(record))};
        out(microtime(true));
        $pdo->beginTransaction();
        out(Queue::enqueue($pdo, 't.record', ['file' => $file], ['queue' => 'work']));
        out(Queue::enqueue($pdo, 't.record', ['file' => $file], ['queue' => 'work', 'delay' => 3]));
        $pdo->commit();"""
    )
    assert jobs(db_url)[later_id]["status"] == "scheduled"
    wait_until(
        lambda: {now_id, later_id} <= set(record_ids(record)),
        timeout=30,
        message=f"jobs {now_id} and {later_id} run by the daemon: {daemon.describe()}",
    )
    starts = {
        int(line.split(",")[0]): float(line.split(",")[2])
        for line in record.read_text().splitlines()
    }
    assert starts[later_id] >= before + 3  # never early
    wait_until(
        lambda: count_rows(db_url, "forkq_jobs") == 0, timeout=10, message="done jobs deleted"
    )
    assert daemon.alive()


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A short FORKQ_RUNTIME_DIR (a socket path must fit in 108 bytes; tmp_path may not)."""
    path = Path(tempfile.mkdtemp(prefix="fqp-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def listening_socket(runtime_dir: Path, db_url: str, name: str = "4242.sock") -> socket.socket:
    """A datagram socket where a daemon of this database would bind one."""
    directory = runtime_dir / database_key(database_identity(parse_database_url(db_url)))
    directory.mkdir(exist_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(directory / name))
    sock.setblocking(False)
    return sock


def received(sock: socket.socket) -> list[bytes]:
    """Every datagram waiting (a unix datagram is queued before the sender's call returns)."""
    found = []
    while True:
        try:
            found.append(sock.recv(4096))
        except BlockingIOError:
            return found


def test_a_job_due_now_nudges_the_local_daemons_of_its_database(
    run_php: Php, db_url: str, runtime_dir: Path
) -> None:
    sock = listening_socket(runtime_dir, db_url)
    directory = Path(sock.getsockname()).parent
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(directory / "1.sock"))
    stale.close()  # a dead master's socket: refuses datagrams
    (directory / "2.sock").write_text("not a socket")
    other = listening_socket(runtime_dir, "sqlite:////elsewhere/other.db")
    wake = {ENV_RUNTIME_DIR: str(runtime_dir)}
    try:
        run_php(
            """out(Queue::enqueue($pdo, 'h', [], ['queue' => 'mail']));
            out(Queue::enqueue($pdo, 'h', [], ['queue' => 'later', 'delay' => 5]));
            out(Queue::enqueue($pdo, 'h', [], ['queue' => 'future', 'run_at' => new DateTimeImmutable('+1 hour')]));
            out(Queue::enqueue($pdo, 'h', [], ['queue' => 'past', 'delay' => 60,
                'run_at' => new DateTimeImmutable('-1 minute')]));
            $pdo->beginTransaction();
            out(Queue::enqueue($pdo, 'h', [], ['queue' => 'in-transaction']));
            $pdo->commit();""",
            env=wake,
        )
        assert received(sock) == [b"mail\n", b"past\n", b"in-transaction\n"]
        assert received(other) == []  # another database's daemons are not bothered
        run_php(
            "out(Queue::enqueue($pdo, 'h', [], ['queue' => 'mail']));", env={**wake, ENV_WAKE: "0"}
        )
        assert received(sock) == []
        assert count_rows(db_url, "forkq_jobs") == 6
    finally:
        sock.close()
        other.close()


def test_a_php_enqueue_nudges_the_directory_a_running_daemon_listens_in(
    daemons: Callable[..., Daemon], run_php: Php, db_url: str, runtime_dir: Path, tmp_path: Path
) -> None:
    """PHP finds the live master's own socket directory: a second listener bound there (as a
    second master on this host would be) receives the datagram, and the job runs.

    Not a latency check: the master also polls every second to promote scheduled jobs,
    which wakes an idle child as well, so only where the datagram lands can tell.
    """
    wake = {ENV_RUNTIME_DIR: str(runtime_dir)}
    daemon = daemons(supervisor={"poll_interval": 30.0}, env=wake).start().wait_ready()
    [master] = wait_until(
        lambda: list(runtime_dir.glob(f"*/{daemon.pid}.sock")), timeout=10, message="wake socket"
    )
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(master.parent / "1.sock"))
    sock.setblocking(False)
    record = tmp_path / "record.txt"
    try:
        [job_id] = run_php(
            f"out(Queue::enqueue($pdo, 't.record', ['file' => {php_string(str(record))}],"
            " ['queue' => 'work']));",
            env=wake,
        )
        assert received(sock) == [b"work\n"]
    finally:
        sock.close()
    wait_until(
        lambda: job_id in record_ids(record), timeout=20, message=f"the job: {daemon.describe()}"
    )
    assert daemon.alive()


# --- the command-handler example ---------------------------------------------------------------


def test_the_php_handler_example_keeps_the_exit_code_contract(tmp_path: Path) -> None:
    binary = php_binary()
    outbox = tmp_path / "outbox"
    outbox.mkdir()
    base = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "FORKQ_QUEUE": "reports",
        "FORKQ_HANDLER": "report.send",
        "FORKQ_ATTEMPT": "1",
    }

    def run(payload: str, job_id: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, str(HANDLER_EXAMPLE)],
            input=payload,
            capture_output=True,
            text=True,
            timeout=30,
            env={**base, "FORKQ_JOB_ID": job_id, **env},
        )

    good = json.dumps({"report": "sales", "to": "boss@example.com", "day": "2026-01-31"})
    done = run(good, "17", REPORT_OUTBOX=str(outbox))
    assert done.returncode == 0, done.stderr
    assert "job=17 attempt=1: sent the sales report" in done.stderr
    assert "Subject: sales report for 2026-01-31" in (outbox / "report-17.txt").read_text()
    for payload in (
        '{"report": "sales"}',
        "not json",
        "[1, 2]",
        good.replace("2026-01-31", "31/01"),
    ):
        dead = run(payload, "18", REPORT_OUTBOX=str(outbox))
        assert dead.returncode == 65, (payload, dead.stderr)
        assert "bad payload" in dead.stderr
    retry = run(good, "19", REPORT_OUTBOX=str(tmp_path / "missing"))
    assert retry.returncode == 1 and "will be retried" in retry.stderr
    assert sorted(p.name for p in outbox.iterdir()) == ["report-17.txt"]
