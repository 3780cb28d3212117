"""A private MariaDB server for tests that must kill, restart or wound the database.

The machine's shared MariaDB (FORKQ_TEST_MYSQL_URL) is never touched by these tests:
`PrivateMariaDB` initialises its own data directory with `mariadb-install-db`, runs its
own `mariadbd` on a free loopback port and a private socket, in a session of its own,
and can `kill9()` it and `start()` it again on the same data directory and port (what
a crash and a restart look like to a client). InnoDB keeps its default durability
(innodb_flush_log_at_trx_commit=1), so a commit the server acknowledged survives kill -9.
The server gets SIGTERM (a clean shutdown) when the process that started it dies: a
pytest killed mid-test, whose teardown never runs, leaves no mariadbd behind.

Clients log in as a real user with a password (`forkq` / `secret` by default), so a
test that looks for a leaked password looks for something that was really sent.
Root has no password and is used over the private socket for setup and for killing
connections (`KILL <id>`).

Fixtures:
- `private_mariadb` (module scope): one started server with the user, a database and
  forkq's schema; stopped and its directory removed at the end, pass or fail.
- `private_db_url`: that server running (restarted if a test left it down), forkq's
  tables emptied; the URL, with the password in it.

`Partition` is a loopback TCP proxy in front of the server that can go silent (a network
partition: no refusal, no reset) and heal. `Webhook` is a Slack-compatible receiver on
loopback, for tests that check which alerts the daemon sends while the database fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pymysql
import pytest
from util import DATA_TABLES, dies_with_us, free_tcp_port, in_ci

from supervisor.store import open_store

# The classes PyMySQL raises, even after Django (install_as_MySQLdb) loaded a second
# copy of pymysql.err in this process: see supervisor/store/mysql_session.py.
DRIVER_ERRORS = sys.modules["pymysql.err"]

INSTALL_DB = "mariadb-install-db"
SERVER = "mariadbd"
START_TIMEOUT = 60.0  # seconds for the server to answer after start (crash recovery included)


def binaries_missing() -> str | None:
    """Why a private server cannot run here, or None."""
    for name in (INSTALL_DB, SERVER):
        if shutil.which(name) is None and not Path("/usr/sbin", name).exists():
            return f"{name} is not installed"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class PrivateMariaDB:
    """One mariadbd of our own: its data directory, socket and port under `root`."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        user: str = "forkq",
        password: str = "secret",
        database: str = "forkq",
    ) -> None:
        self.owns_root = root is None
        self.root = Path(root or tempfile.mkdtemp(prefix="forkq-mariadb-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.datadir = self.root / "data"
        self.socket = str(self.root / "sock")
        self.pid_file = self.root / "mariadbd.pid"
        self.log_path = self.root / "mariadbd.log"
        self.port = free_tcp_port()
        self.user = user
        self.password = password
        self.database = database
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kills = 0
        self._installed = False
        # More mariadbd options, after forkq's (a Galera node's: tests/private_galera.py).
        self.extra_options: list[str] = []

    # --- addresses -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """forkq's URL for this server: the real user and password, over TCP."""
        return self.url_for(self.user, self.password, self.database)

    def url_for(self, user: str, password: str, database: str | None = None) -> str:
        auth = f"{user}:{password}" if password else user
        return f"mysql://{auth}@127.0.0.1:{self.port}/{database or self.database}"

    def _server_options(self) -> list[str]:
        tmpdir = self.root / "tmp"  # its temporary tables its own: not /tmp, which others share
        tmpdir.mkdir(exist_ok=True)
        options = [
            "--no-defaults",  # must come first: no /etc/mysql config leaks in
            f"--datadir={self.datadir}",
            "--innodb-buffer-pool-size=64M",
            "--innodb-log-file-size=16M",
            f"--tmpdir={tmpdir}",
        ]
        if os.geteuid() == 0:
            options.append("--user=root")  # mariadbd refuses to run as root without it
        return options

    # --- life ------------------------------------------------------------------------------

    def install(self) -> None:
        """Initialise the data directory (system tables; root logs in without a password)."""
        if self._installed:
            return
        user = "root" if os.geteuid() == 0 else _current_user()
        command = [
            _binary(INSTALL_DB),
            *self._server_options()[:5],
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            f"--user={user}",
        ]
        with open(self.root / "install.log", "wb") as log:
            result = subprocess.run(
                command, stdout=log, stderr=subprocess.STDOUT, timeout=120, check=False
            )
        if result.returncode != 0:
            tail = (self.root / "install.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{INSTALL_DB} failed ({result.returncode}):\n{tail}")
        self._installed = True

    def start(self, timeout: float = START_TIMEOUT) -> PrivateMariaDB:
        """Start mariadbd (same data directory, same port) and wait until it answers."""
        assert not self.alive(), "already running"
        self.install()
        command = [
            _binary(SERVER),
            *self._server_options(),
            f"--socket={self.socket}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={self.pid_file}",
            f"--log-error={self.log_path}",
            "--skip-log-bin",
            "--skip-name-resolve",
            "--port-open-timeout=20",  # after a kill -9 the port may take a moment to free
            "--innodb-flush-log-at-trx-commit=1",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_bin",
            "--max-connections=500",
            *self.extra_options,
        ]
        with open(self.root / "mariadbd.stdout", "ab") as out:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=dies_with_us(signal.SIGTERM),  # a clean shutdown if pytest dies
            )
        self.starts += 1
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"mariadbd exited with {self.proc.returncode} at start:\n{self.log_tail()}"
                )
            try:
                self.admin("SELECT 1")
                return self
            except DRIVER_ERRORS.MySQLError:
                if time.monotonic() > deadline:
                    self.kill9()
                    raise RuntimeError(
                        f"mariadbd did not answer within {timeout:g}s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.alive() and self.proc else None

    def kill9(self) -> None:
        """SIGKILL the server (a crash): no shutdown, no flush beyond what was committed."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.kills += 1

    def restart(self, down_for: float = 0.0) -> None:
        """kill -9, stay down `down_for` seconds, start again."""
        self.kill9()
        time.sleep(down_for)
        self.start()

    def stop(self, timeout: float = 30.0) -> None:
        """A clean shutdown (SIGTERM), then SIGKILL if it takes too long."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill9()

    def destroy(self) -> None:
        """Kill the server, whatever state it is in, and remove everything it wrote."""
        try:
            if self.proc is not None and self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=30)
        finally:
            if self.owns_root:
                shutil.rmtree(self.root, ignore_errors=True)
            else:
                shutil.rmtree(self.datadir, ignore_errors=True)

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # --- administration (root over the private socket) --------------------------------------

    def admin_connection(self) -> Any:
        return pymysql.connect(
            unix_socket=self.socket,
            user="root",
            password="",
            autocommit=True,
            connect_timeout=2,
            read_timeout=30,
            write_timeout=30,
            charset="utf8mb4",
        )

    def admin(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        conn = self.admin_connection()
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement, params)
                return list(cursor.fetchall())
        finally:
            conn.close()

    def create_user(self, user: str, password: str, database: str | None = None) -> None:
        """A user with every right on `database` (created utf8mb4_bin if missing)."""
        database = database or self.database
        assert user.isidentifier() and database.isidentifier(), (user, database)
        conn = self.admin_connection()
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    f"CREATE DATABASE IF NOT EXISTS `{database}` "
                    "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                )
                for host in ("127.0.0.1", "localhost", "%"):
                    cursor.execute(
                        "CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (user, host, password)
                    )
                    cursor.execute(f"GRANT ALL ON `{database}`.* TO %s@%s", (user, host))
        finally:
            conn.close()

    def setup_forkq(self) -> None:
        """The user, the database and forkq's schema (idempotent)."""
        self.create_user(self.user, self.password, self.database)
        store = open_store(self.url)
        try:
            store.apply_schema()
        finally:
            store.close()

    def empty_tables(self) -> None:
        conn = self.admin_connection()
        try:
            with conn.cursor() as cursor:
                for table in DATA_TABLES:
                    cursor.execute(f"DELETE FROM `{self.database}`.{table}")
        finally:
            conn.close()

    def connections(self, user: str | None = None, conn: Any = None) -> list[dict[str, Any]]:
        """information_schema.PROCESSLIST rows of `user` (default: forkq's user); TRX is the
        InnoDB transaction the connection has open (None outside a transaction)."""
        own = conn is None
        conn = conn or self.admin_connection()
        try:
            with conn.cursor(pymysql.cursors.DictCursor) as cursor:
                cursor.execute(
                    "SELECT p.ID, p.USER, p.HOST, p.DB, p.COMMAND, p.TIME, p.STATE, p.INFO, "
                    "t.trx_id AS TRX "
                    "FROM information_schema.PROCESSLIST p "
                    "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID "
                    "WHERE p.USER = %s",
                    (user or self.user,),
                )
                return list(cursor.fetchall())
        finally:
            if own:
                conn.close()

    def kill_connection(self, connection_id: int, conn: Any = None) -> bool:
        """`KILL <id>` (connection and its transaction); False if it was gone already."""
        own = conn is None
        conn = conn or self.admin_connection()
        try:
            with conn.cursor() as cursor:
                cursor.execute("KILL %s", (int(connection_id),))
            return True
        except DRIVER_ERRORS.OperationalError as exc:
            if exc.args and exc.args[0] == 1094:  # Unknown thread id: it already left
                return False
            raise
        finally:
            if own:
                conn.close()


# --- a loopback alert receiver (the fault and security suites check what alerts say) -------


class Webhook:
    """A Slack-compatible endpoint on loopback that keeps every {"text": ...} it is sent."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        received = self.texts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    received.append(str(json.loads(body)["text"]))
                except (ValueError, KeyError, TypeError):
                    received.append(f"<unreadable: {body[:200]!r}>")
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T0K3N"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- a TCP proxy that can play a network partition --------------------------------------------


class Partition:
    """A loopback TCP proxy in front of a server that can stop answering, as a network
    partition or a frozen server does: no RST, no FIN, just silence.

    `cut()`: bytes stop flowing on open connections and new connections are accepted by
    the kernel but never answered (a client waits for its timeout). `heal()`: traffic
    flows again; connections opened during the cut are then forwarded too.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.flowing = threading.Event()
        self.flowing.set()
        self.closed = False
        self.sockets: list[socket.socket] = []
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = int(self.listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.closed = True
        self.flowing.set()
        for sock in [self.listener, *self.sockets]:
            # shutdown first: close() alone leaves a socket a pump thread sits in recv() on
            # open, and the server keeps that session, and any locks it holds, for hours.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        self.sockets.append(client)
        self.flowing.wait()  # during a cut the client waits for a greeting that never comes
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        self.sockets.append(upstream)
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                self.flowing.wait()  # held, not dropped: delivered late after a heal
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def _current_user() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def unavailable(reason: str) -> None:
    """Skip locally; fail on CI, where a skipped fault suite would hide a broken build."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: the private MariaDB must run)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def private_mariadb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMariaDB]:
    """A started private server with forkq's user, database and schema."""
    missing = binaries_missing()
    if missing:
        unavailable(f"private MariaDB: {missing}")
    server = PrivateMariaDB(tmp_path_factory.mktemp("mariadb"))
    try:
        server.start()
        server.setup_forkq()
        yield server
    finally:
        server.destroy()


@pytest.fixture
def private_db_url(private_mariadb: PrivateMariaDB) -> str:
    """The private server up (restarted if a test left it down), forkq's tables emptied."""
    if not private_mariadb.alive():
        private_mariadb.start()
    # Every process of the last test is dead: a transaction of forkq's user still open is
    # one whose socket outlived it, and its row locks would stall the DELETEs below.
    for session in private_mariadb.connections():
        if session["TRX"] is not None:
            private_mariadb.kill_connection(session["ID"])
    private_mariadb.empty_tables()
    return private_mariadb.url
