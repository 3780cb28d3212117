"""A private 3-node MariaDB Galera cluster on loopback, for tests that kill a node.

Three `PrivateMariaDB`s (private_mariadb.py), each with its data directory, socket and
client port, and its own Galera ports (group communication, IST, SST) chosen free on
127.0.0.1. Node 1 bootstraps the cluster (`--wsrep-new-cluster`); nodes 2 and 3 join it
with an empty data directory and receive it by rsync SST. The shared MariaDB is never
touched. Needs Debian's `galera-4` (/usr/lib/galera/libgalera_smm.so, a dependency of
mariadb-server) and `rsync` (scripts/ensure-tools.sh installs it).

`with_nodes(daemon, urls)` configures a daemon of tests/daemon_util.py on the nodes.
Fixture: `galera` (module scope): the started cluster with forkq's user, database and
schema; every node destroyed at the end, pass or fail.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_util import Daemon, render_config, toml_value
from private_mariadb import PrivateMariaDB, binaries_missing, unavailable
from util import free_tcp_port

PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
NOBODY = pwd.getpwnam("nobody")
SYNC_TIMEOUT = 120.0  # seconds for a joiner to receive its SST and report itself Synced


def galera_missing() -> str | None:
    """Why a private Galera cluster cannot run here, or None."""
    if missing := binaries_missing():
        return missing
    if not PROVIDER.exists():
        return f"{PROVIDER} is missing (Debian's galera-4)"
    for program in ("rsync", "wsrep_sst_rsync"):
        if shutil.which(program) is None:
            return f"{program} is not installed"
    return None


class GaleraCluster:
    """Three Galera nodes of our own under `root`: node 1 bootstraps, 2 and 3 join."""

    def __init__(self, size: int = 3) -> None:
        # Not under pytest's tmp_path (mode 0700): the SST's rsync daemon, started by a
        # root mariadbd, runs as `nobody` and must reach and write a joiner's directory.
        self.root = Path(tempfile.mkdtemp(prefix="forkq-galera-"))
        self.nodes = [PrivateMariaDB(self.root / f"node{n}") for n in range(1, size + 1)]
        self.gcomm = [free_tcp_port() for _ in self.nodes]
        for number, node in enumerate(self.nodes):
            node.extra_options = self._options(number)
            if number:  # a joiner receives the whole data directory by SST
                node.datadir.mkdir(parents=True, exist_ok=True)
                node._installed = True
        self.root.chmod(0o755)
        for node in self.nodes:
            node.root.chmod(0o755)

    def _options(self, number: int) -> list[str]:
        members = ",".join(f"127.0.0.1:{port}" for port in self.gcomm)
        gcomm, ist, sst = self.gcomm[number], free_tcp_port(), free_tcp_port()
        provider = (
            f"gmcast.listen_addr=tcp://127.0.0.1:{gcomm};ist.recv_addr=127.0.0.1:{ist};"
            "gcache.size=64M;evs.suspect_timeout=PT3S;evs.inactive_timeout=PT6S;"
            "evs.install_timeout=PT6S;pc.wait_prim_timeout=PT10S"
        )
        return [
            "--wsrep-on=ON",
            f"--wsrep-provider={PROVIDER}",
            "--wsrep-cluster-name=forkq-test",
            f"--wsrep-cluster-address=gcomm://{members}",
            f"--wsrep-node-address=127.0.0.1:{gcomm}",
            f"--wsrep-node-name=node{number + 1}",
            f"--wsrep-provider-options={provider}",
            f"--wsrep-sst-receive-address=127.0.0.1:{sst}",
            "--wsrep-sst-method=rsync",
            "--binlog-format=ROW",
            "--innodb-autoinc-lock-mode=2",
        ]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def _hand_to_rsync(self, node: PrivateMariaDB) -> None:
        """As root, the data directory belongs to `nobody`, who receives an SST into it."""
        if os.geteuid() != 0:
            return  # mariadbd and its rsync daemon both run as this user
        for path in (node.datadir, *node.datadir.rglob("*")):
            os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)

    def start(self) -> GaleraCluster:
        first = self.nodes[0]
        first.install()
        for node in self.nodes:
            self._hand_to_rsync(node)
        first.extra_options = [*first.extra_options, "--wsrep-new-cluster"]
        first.start()
        first.extra_options.remove("--wsrep-new-cluster")  # a restart joins the others
        self.wait_synced(first)
        first.setup_forkq()  # the user, database and schema: replicated to every joiner
        for node in self.nodes[1:]:
            self.start_node(node)
        return self

    def start_node(self, node: PrivateMariaDB) -> None:
        """Start (or restart after a kill) one node and wait until it is Synced."""
        self._hand_to_rsync(node)  # what it wrote while it ran, should it need an SST
        node.start(timeout=SYNC_TIMEOUT)
        self.wait_synced(node)

    def wait_synced(self, node: PrivateMariaDB, timeout: float = SYNC_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while self.state(node) != "Synced":
            if time.monotonic() > deadline or not node.alive():
                raise RuntimeError(f"node not Synced ({self.state(node)}):\n{node.log_tail()}")
            time.sleep(0.1)

    def state(self, node: PrivateMariaDB) -> str:
        try:
            rows = node.admin("SHOW GLOBAL STATUS LIKE 'wsrep_local_state_comment'")
        except Exception as exc:  # down, or still receiving its SST
            return f"unreachable: {exc}"
        return str(rows[0][1]) if rows else "not a Galera node"

    def size(self, node: PrivateMariaDB) -> int:
        return int(node.admin("SHOW GLOBAL STATUS LIKE 'wsrep_cluster_size'")[0][1])

    def ensure_whole(self) -> None:
        """Every node up and Synced again (a test may have killed one)."""
        for node in self.nodes:
            if not node.alive():
                self.start_node(node)
        for node in self.nodes:
            self.wait_synced(node)

    def empty_tables(self) -> None:
        self.nodes[0].empty_tables()  # replicated: every node sees it

    def destroy(self) -> None:
        try:
            for node in reversed(self.nodes):
                node.destroy()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def with_nodes(daemon: Daemon, urls: list[str], extra: str = "") -> Daemon:
    """`daemon` (tests/daemon_util.py, not started) configured on the cluster's nodes in
    the order `urls` gives them (`[database] nodes`), `extra` TOML appended."""
    text = render_config(urls[0], daemon.pools, daemon.supervisor)
    text = text.replace("[database]\n", f"[database]\nnodes = {toml_value(urls)}\n", 1)
    daemon.write_config(text=text + extra)
    return daemon


@pytest.fixture(scope="module")
def galera() -> Iterator[GaleraCluster]:
    missing = galera_missing()
    if missing:
        unavailable(f"private Galera cluster: {missing}")
    cluster = GaleraCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
