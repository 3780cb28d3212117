"""Same-host wake-up (supervisor/wake.py): producers nudge local daemons over a datagram socket.

The first part needs no daemon: where the sockets live, the listener and the producer
over real sockets, real processes (other masters, a master killed -9), hostile
datagrams. `TestWithTheMaster` runs the real daemon and needs the master to create
the listener (`pytest tests/daemon/test_wake.py -k TestWithTheMaster`).

No assertion is about time: a deadline far shorter than the poll interval only tells
the nudge path from the poll path.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import structlog
from daemon_util import (
    Daemon,
    daemons_fixture,  # noqa: F401  (the `daemons` fixture)
    record_ids,
)
from util import REPO_ROOT, dies_with_us, sqlite_url_for, wait_until

from supervisor import Queue, events, logs
from supervisor.dburl import parse_database_url
from supervisor.wake import (
    ENV_RUNTIME_DIR,
    ENV_WAKE,
    MAX_NAME_BYTES,
    MAX_NAMES_PER_DRAIN,
    Nudger,
    WakeListener,
    daemon_runtime_dir,
    database_identity,
    database_key,
    listen,
    nudge,
    producer_dirs,
    user_runtime_dir,
)

SECRET = "s3cret-Pa55word"


@pytest.fixture
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short FORKQ_RUNTIME_DIR (socket paths must fit in 108 bytes; tmp_path may not)."""
    path = Path(tempfile.mkdtemp(prefix="fqw-"))
    monkeypatch.setenv(ENV_RUNTIME_DIR, str(path))
    monkeypatch.delenv(ENV_WAKE, raising=False)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def identity(url: str) -> str:
    return database_identity(parse_database_url(url))


def sockets_in(directory: Path) -> list[Path]:
    return sorted(directory.glob("*/*.sock"))


def subprocess_env(runtime_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env[ENV_RUNTIME_DIR] = str(runtime_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.pop(ENV_WAKE, None)
    return env


# A master stand-in in a process of its own: binds, says where, reports what it got.
LISTENER_SCRIPT = """
import json, select, sys, time
from supervisor.wake import WakeListener
listener = WakeListener.bind(sys.argv[1])
print(listener.path, flush=True)
if sys.argv[2] == "hold":
    time.sleep(60)
if sys.argv[2] == "exit":
    listener.close()
    sys.exit(0)
select.select([listener], [], [], 20)
print(json.dumps(sorted(listener.drain())), flush=True)
listener.close()
"""


def start_listener(runtime_dir: Path, ident: str, mode: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTENER_SCRIPT, ident, mode],
        env=subprocess_env(runtime_dir),
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=dies_with_us(signal.SIGTERM),
    )
    assert proc.stdout is not None
    path = proc.stdout.readline().strip()
    assert path, f"listener process said nothing (exit {proc.poll()})"
    return proc, path


# --- where the sockets live ------------------------------------------------------------------


def test_the_socket_path_never_contains_the_password_or_user(runtime_dir: Path) -> None:
    url = f"mysql://appuser:{SECRET}@db.example.internal:3306/shop"
    ident = identity(url)
    assert SECRET not in ident and "appuser" not in ident
    listener = WakeListener.bind(ident)
    try:
        assert SECRET not in listener.path and "appuser" not in listener.path
        assert "shop" not in listener.path  # only a hash of the identity
        assert Path(listener.path).parent.name == database_key(ident)
    finally:
        listener.close()


def test_the_same_database_gets_the_same_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    same_server = [
        "mysql://a:one@127.0.0.1:3306/shop",
        "mysql://b:two@localhost:3306/shop",
        "mysql://c@localhost:3307/shop",  # local: the port is not part of the identity
        "mysql://d@localhost/shop?unix_socket=/run/mysqld/mysqld.sock",
    ]
    assert len({database_key(identity(u)) for u in same_server}) == 1
    remote = ["mysql://a:x@DB.example:3306/shop", "mysql://b:y@db.example:3306/shop"]
    assert len({database_key(identity(u)) for u in remote}) == 1
    (tmp_path / "app").mkdir()
    monkeypatch.chdir(tmp_path)
    relative = identity("sqlite:///app/forkq.db")
    absolute = identity(sqlite_url_for(tmp_path / "app" / "forkq.db"))
    assert relative == absolute


def test_different_databases_get_different_directories(tmp_path: Path) -> None:
    urls = [
        "mysql://u:p@127.0.0.1:3306/shop",
        "mysql://u:p@127.0.0.1:3306/blog",
        "mysql://u:p@db1.example:3306/shop",
        "mysql://u:p@db2.example:3306/shop",
        "mysql://u:p@db1.example:3307/shop",
        sqlite_url_for(tmp_path / "one.db"),
        sqlite_url_for(tmp_path / "two.db"),
    ]
    keys = [database_key(identity(u)) for u in urls]
    assert len(set(keys)) == len(urls)


def test_without_an_override_the_daemon_uses_run_forkq_or_a_per_user_dir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_RUNTIME_DIR, raising=False)
    base, private = daemon_runtime_dir()
    if os.path.isdir("/run/forkq") and os.access("/run/forkq", os.W_OK | os.X_OK):
        assert (base, private) == ("/run/forkq", False)
    else:
        assert (base, private) == (user_runtime_dir(), True)
        assert base.startswith(tempfile.gettempdir())
        assert base.endswith(f"forkq-{os.getuid()}")
    looked_in = [d for d, _ in producer_dirs("x", "")]
    key = database_key("x")
    assert looked_in == [f"/run/forkq/{key}", os.path.join(user_runtime_dir(), key)]


def test_the_per_user_fallback_works_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_RUNTIME_DIR, raising=False)
    monkeypatch.delenv(ENV_WAKE, raising=False)
    if os.path.isdir("/run/forkq"):
        pytest.skip("/run/forkq exists here: the per-user fallback is not used")
    temp = tempfile.mkdtemp(prefix="fqt-")
    monkeypatch.setattr(tempfile, "tempdir", temp)
    try:
        listener = WakeListener.bind("sqlite:/some/file.db")
        try:
            assert listener.path.startswith(os.path.join(temp, f"forkq-{os.getuid()}") + "/")
            Nudger("sqlite:/some/file.db").nudge(["mail"])
            assert listener.drain() == {"mail"}
        finally:
            listener.close()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_a_per_user_dir_others_can_write_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a shared /tmp someone else may have made forkq-<uid> first."""
    monkeypatch.delenv(ENV_RUNTIME_DIR, raising=False)
    monkeypatch.delenv(ENV_WAKE, raising=False)
    if os.path.isdir("/run/forkq"):
        pytest.skip("/run/forkq exists here: the per-user fallback is not used")
    temp = tempfile.mkdtemp(prefix="fqt-")
    monkeypatch.setattr(tempfile, "tempdir", temp)
    try:
        squatted = Path(user_runtime_dir())
        squatted.mkdir()
        squatted.chmod(0o777)
        with pytest.raises(OSError, match="not owned by this user alone"):
            WakeListener.bind("sqlite:/some/file.db")
        with structlog.testing.capture_logs() as captured:
            assert listen(parse_database_url("sqlite:///some/file.db"), logs.get()) is None
        assert [e["event"] for e in captured] == [events.WAKE_SOCKET_UNAVAILABLE]
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_sockets_and_directories_let_other_users_send(runtime_dir: Path) -> None:
    old_umask = os.umask(0o077)  # what a locked-down service (UMask=0027 or stricter) has
    try:
        listener = WakeListener.bind("sqlite:/perm.db")
    finally:
        os.umask(old_umask)
    try:
        path = Path(listener.path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o666
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    finally:
        listener.close()


# --- listener and producer over real sockets -------------------------------------------------


def test_a_nudge_reaches_the_listener(runtime_dir: Path) -> None:
    listener = WakeListener.bind("sqlite:/a.db")
    try:
        nudge("sqlite:/a.db", ["mail", "reports", "mail"])
        assert listener.drain() == {"mail", "reports"}
        assert listener.drain() == set()
        nudge("sqlite:/other.db", ["mail"])  # another database: another directory
        assert listener.drain() == set()
    finally:
        listener.close()
    assert not Path(listener.path).exists()


def test_enqueue_nudges_the_queues_of_jobs_due_now(runtime_dir: Path, db_url: str) -> None:
    listener = WakeListener.bind(identity(db_url))
    queue = Queue(db_url)
    try:
        queue.enqueue("t.noop", queue="mail")
        assert listener.drain() == {"mail"}
        queue.enqueue("t.noop", queue="mail", delay=3600)  # not due: no hurry
        assert listener.drain() == set()
        queue.enqueue_many(
            [
                {"handler": "t.noop", "queue": "a"},
                {"handler": "t.noop", "queue": "b"},
                {"handler": "t.noop", "queue": "a"},
                {"handler": "t.noop", "queue": "later", "delay": 60},
            ]
        )
        assert listener.drain() == {"a", "b"}
    finally:
        queue.close()
        listener.close()


def test_a_nudge_can_be_turned_off(
    runtime_dir: Path, sqlite_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener = WakeListener.bind(identity(sqlite_db_url))
    try:
        quiet = Queue(sqlite_db_url, wake=False)
        quiet.enqueue("t.noop", queue="mail")
        quiet.close()
        assert listener.drain() == set()
        monkeypatch.setenv(ENV_WAKE, "0")
        off = Queue(sqlite_db_url)
        off.enqueue("t.noop", queue="mail")
        off.close()
        nudge(identity(sqlite_db_url), ["mail"])
        assert listener.drain() == set()
        with structlog.testing.capture_logs() as captured:
            assert listen(parse_database_url(sqlite_db_url), logs.get()) is None
        assert [e["event"] for e in captured] == [events.WAKE_SOCKET_OFF]
    finally:
        listener.close()


def test_a_transactional_enqueue_nudges_before_the_commit(
    runtime_dir: Path, sqlite_db_url: str
) -> None:
    """Documented choice: the nudge goes out at insert time; the poll covers a later commit."""
    import sqlite3

    listener = WakeListener.bind(identity(sqlite_db_url))
    queue = Queue(sqlite_db_url)
    conn = sqlite3.connect(parse_database_url(sqlite_db_url).path)
    try:
        conn.execute("BEGIN")
        queue.enqueue("t.noop", queue="mail", connection=conn)
        assert listener.drain() == {"mail"}
        conn.rollback()
    finally:
        conn.close()
        queue.close()
        listener.close()


def test_several_masters_each_get_their_own_socket_and_every_one_is_nudged(
    runtime_dir: Path,
) -> None:
    ident = "sqlite:/shared.db"
    other, other_path = start_listener(runtime_dir, ident, "once")
    try:
        mine = WakeListener.bind(ident)
        try:
            assert Path(mine.path).parent == Path(other_path).parent
            assert mine.path != other_path
            assert Path(mine.path).name == f"{os.getpid()}.sock"
            assert Path(other_path).name == f"{other.pid}.sock"
            nudge(ident, ["mail"])
            assert mine.drain() == {"mail"}
            out, _ = other.communicate(timeout=20)
            assert json.loads(out) == ["mail"]
        finally:
            mine.close()
    finally:
        other.kill()
        other.wait(timeout=10)


def test_a_dead_masters_socket_is_skipped_and_swept_by_the_next_master(runtime_dir: Path) -> None:
    ident = "sqlite:/stale.db"
    live = WakeListener.bind(ident)
    try:
        dead, dead_path = start_listener(runtime_dir, ident, "hold")
        dead.send_signal(signal.SIGKILL)  # a master killed -9 leaves its socket behind
        dead.wait(timeout=10)
        assert Path(dead_path).exists()
        nudger = Nudger(ident)
        nudger.nudge(["mail"])  # ECONNREFUSED from the dead one: skipped, never raised
        assert live.drain() == {"mail"}
        assert dead_path not in nudger.paths and live.path in nudger.paths
        nudger.nudge(["again"])
        assert live.drain() == {"again"}
        successor, _ = start_listener(runtime_dir, ident, "exit")  # another master boots
        assert successor.wait(timeout=20) == 0
        assert not Path(dead_path).exists()
        assert Path(live.path).exists()  # a live master's socket is left alone
    finally:
        live.close()


def test_close_in_a_forked_child_leaves_the_masters_socket(runtime_dir: Path) -> None:
    listener = WakeListener.bind("sqlite:/fork.db")
    try:
        pid = os.fork()
        if pid == 0:
            try:
                listener.close()
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert Path(listener.path).exists()
        nudge("sqlite:/fork.db", ["mail"])
        assert listener.drain() == {"mail"}
    finally:
        listener.close()
    assert not Path(listener.path).exists()


def test_binding_that_cannot_work_returns_none(
    runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (runtime_dir / "file").write_text("not a directory")
    monkeypatch.setenv(ENV_RUNTIME_DIR, str(runtime_dir / "file"))
    with structlog.testing.capture_logs() as captured:
        assert listen(parse_database_url("sqlite:///x.db"), logs.get()) is None
    assert [e["event"] for e in captured] == [events.WAKE_SOCKET_UNAVAILABLE]
    monkeypatch.setenv(ENV_RUNTIME_DIR, str(runtime_dir / ("long-" * 30)))  # past AF_UNIX's 108
    with structlog.testing.capture_logs() as captured:
        assert listen(parse_database_url("sqlite:///x.db"), logs.get()) is None
    assert [e["event"] for e in captured] == [events.WAKE_SOCKET_UNAVAILABLE]


# --- what a hostile local process can send ---------------------------------------------------


def hostile_socket() -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)
    return sock


def test_huge_and_binary_datagrams_are_capped_and_never_raise(runtime_dir: Path) -> None:
    listener = WakeListener.bind("sqlite:/hostile.db")
    sender = hostile_socket()
    try:
        sender.sendto(b"x" * 150_000, listener.path)  # one endless line: cut, then dropped
        assert listener.drain() == set()
        sender.sendto(b"mail\n" + b"y" * (MAX_NAME_BYTES + 1) + b"\n\xff\xfe\x00\n", listener.path)
        assert listener.drain() == {"mail"}  # too long and undecodable names dropped
        many = "\n".join(f"q{i}" for i in range(2000)).encode()
        sender.sendto(many, listener.path)
        names = listener.drain()
        assert 0 < len(names) <= MAX_NAMES_PER_DRAIN
        assert names <= {f"q{i}" for i in range(2000)}
        for _ in range(20):
            sender.sendto(os.urandom(4096), listener.path)
            for name in listener.drain():
                assert isinstance(name, str) and 0 < len(name.encode()) <= MAX_NAME_BYTES
    finally:
        sender.close()
        listener.close()


def test_thousands_of_datagrams_never_raise_on_either_side(runtime_dir: Path) -> None:
    listener = WakeListener.bind("sqlite:/flood.db")
    sender = hostile_socket()
    nudger = Nudger("sqlite:/flood.db")
    sent = refused = 0
    drained: set[str] = set()
    try:
        for i in range(5000):
            try:
                sender.sendto(f"n{i % 50}\n".encode(), listener.path)
                sent += 1
            except BlockingIOError:  # the socket's queue is full: what a flood achieves
                refused += 1
                nudger.nudge(["mail"])  # a producer meanwhile: silently dropped, no error
            if i % 100 == 0:
                got = listener.drain()
                assert len(got) <= MAX_NAMES_PER_DRAIN
                drained |= got
        drained |= listener.drain()
        assert sent > 0
        assert drained - {"mail"} <= {f"n{i}" for i in range(50)}
        nudger.nudge(["mail"])  # drained: a nudge gets through again
        assert "mail" in listener.drain()
    finally:
        sender.close()
        listener.close()


def test_a_nudge_with_no_daemon_is_silent_and_creates_no_socket(runtime_dir: Path) -> None:
    """In a fresh process: no daemon directory, no exception, no socket opened."""
    script = """
import os, sys
from supervisor.wake import Nudger, nudge
nudger = Nudger("sqlite:/nobody.db")
for _ in range(1000):
    nudger.nudge(["mail"])
nudge("sqlite:/nobody.db", ["mail"])
sockets = 0
for fd in os.listdir("/proc/self/fd"):
    try:
        sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    except OSError:  # the listing's own descriptor, closed by now
        pass
print(sockets)
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=subprocess_env(runtime_dir),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"
    assert list(runtime_dir.iterdir()) == []


def test_a_nudge_into_an_unusable_directory_is_silent(runtime_dir: Path) -> None:
    key_dir = runtime_dir / database_key("sqlite:/odd.db")
    key_dir.mkdir()
    (key_dir / "123.sock").write_text("a regular file, not a socket")
    (key_dir / "456.sock").mkdir()
    nudger = Nudger("sqlite:/odd.db")
    nudger.nudge(["mail"])
    nudger.nudge([""])  # nothing to say: nothing sent
    nudger.nudge(["x" * 10_000, "a\nb"])


# --- with the real master ---------------------------------------------------------------------


@pytest.fixture
def wake_env(runtime_dir: Path) -> dict[str, str]:
    return {ENV_RUNTIME_DIR: str(runtime_dir)}


def master_socket(runtime_dir: Path, daemon: Daemon) -> Path:
    def bound() -> Path | None:
        found = [p for p in sockets_in(runtime_dir) if p.name == f"{daemon.pid}.sock"]
        return found[0] if found else None

    return wait_until(bound, timeout=10, message=f"{daemon.name}'s wake socket")


SLOW_POLL = {"poll_interval": 30.0}  # the poll would take 30 s; a nudge is at once


class TestWithTheMaster:
    """Need the master integration (wake.listen at boot, its fd in select)."""

    def test_a_same_host_job_starts_long_before_the_poll(
        self,
        daemons: Callable[..., Daemon],
        db_url: str,
        runtime_dir: Path,
        wake_env: dict[str, str],
        tmp_path: Path,
    ) -> None:
        daemon = daemons(supervisor=SLOW_POLL, env=wake_env).start().wait_ready()
        master_socket(runtime_dir, daemon)
        record = tmp_path / "record.txt"
        queue = Queue(db_url)
        try:
            job_id = queue.enqueue("t.record", {"file": str(record)}, queue="work")

            def started() -> bool:
                if job_id in record_ids(record):
                    return True
                # The child's idle report may reach the master just after our datagram:
                # nudge again (still no poll involved).
                assert queue.nudger is not None
                queue.nudger.nudge(["work"])
                return False

            wait_until(started, timeout=10, interval=0.2, message="the nudged job to run")
        finally:
            queue.close()
        assert daemon.alive()

    @pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
    def test_children_do_not_hold_the_wake_socket(
        self, daemons: Callable[..., Daemon], runtime_dir: Path, wake_env: dict[str, str]
    ) -> None:
        daemon = daemons(pools={"work": {"workers": 2}}, env=wake_env).start().wait_ready()
        path = str(master_socket(runtime_dir, daemon))
        master_paths = {c.laddr for c in psutil.Process(daemon.pid).net_connections("unix")}
        assert path in master_paths
        for child in daemon.children():
            held = {c.laddr for c in child.net_connections("unix")}
            assert path not in held, f"child {child.pid} inherited the wake socket"

    @pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
    def test_hostile_datagrams_do_not_disturb_the_daemon(
        self,
        daemons: Callable[..., Daemon],
        db_url: str,
        runtime_dir: Path,
        wake_env: dict[str, str],
        tmp_path: Path,
    ) -> None:
        daemon = daemons(supervisor=SLOW_POLL, env=wake_env).start().wait_ready()
        path = str(master_socket(runtime_dir, daemon))
        sender = hostile_socket()
        try:
            for i in range(3000):
                payload = [b"x" * 100_000, os.urandom(2048), b"nosuchpool\n", b"work\x00\n"][i % 4]
                with contextlib.suppress(BlockingIOError):
                    sender.sendto(payload, path)
        finally:
            sender.close()
        record = tmp_path / "record.txt"
        queue = Queue(db_url)
        try:
            job_id = queue.enqueue("t.record", {"file": str(record)}, queue="work")

            def started() -> bool:
                if job_id in record_ids(record):
                    return True
                assert queue.nudger is not None
                queue.nudger.nudge(["work"])
                return False

            wait_until(started, timeout=10, interval=0.2, message="a job after the flood")
        finally:
            queue.close()
        assert daemon.alive()
        assert not daemon.events(events.MASTER_CRASHED)

    @pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
    def test_two_masters_on_one_database_each_bind_and_unlink_their_socket(
        self, daemons: Callable[..., Daemon], runtime_dir: Path, wake_env: dict[str, str]
    ) -> None:
        first = daemons(name="first", env=wake_env).start().wait_ready()
        second = daemons(name="second", env=wake_env).start().wait_ready()
        one, two = master_socket(runtime_dir, first), master_socket(runtime_dir, second)
        assert one.parent == two.parent and one != two
        assert first.stop() == 0, first.describe()
        assert not one.exists() and two.exists()
        assert second.stop() == 0, second.describe()
        assert sockets_in(runtime_dir) == []
