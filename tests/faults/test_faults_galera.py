"""A 3-node Galera cluster (issue 24, items 1 and 3): private `mariadbd`s on loopback
(tests/private_galera.py), one cluster for the module.

- A drain with the daemon on node 1 (`[database] nodes`, node 1 first), node 1 killed
  -9 mid-drain: every job runs, no job is run by two workers at once, the daemon carries
  on through another node, and goes back to node 1 once it is Synced again.
- A transaction whose COMMIT fails certification is run again, never an error.
- One queue claimed through two nodes at once (two daemons, each preferring another
  node): every job runs exactly once, and the certification conflicts this costs are
  retried and counted in forkq_db_conflicts_total.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from daemon_util import Daemon
from private_galera import GaleraCluster, galera, with_nodes  # noqa: F401 - the fixture
from pymysql.constants import CLIENT
from util import free_tcp_port, wait_until

from supervisor import Queue, events
from supervisor.errors import TransientDatabaseError
from supervisor.store import core, open_store
from supervisor.store.galera import NODE_RECHECK

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]


@pytest.fixture
def cluster(galera: GaleraCluster) -> GaleraCluster:  # noqa: F811
    """The cluster whole again (a test may have killed a node), forkq's tables empty."""
    galera.ensure_whole()
    galera.empty_tables()
    return galera


@pytest.fixture
def make_daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def make(nodes: list[str], name: str, workers: int, metrics_port: int | None = None) -> Daemon:
        # timeout 5: a lease of 35 s, for the jobs of a claim whose answer node 1 took down
        pools = {"work": {"workers": workers, "on_success": "keep", "timeout": 5}}
        daemon = Daemon(tmp_path, nodes[0], pools=pools, name=name)
        listen = f'\n[metrics]\nlisten = "127.0.0.1:{metrics_port}"\n' if metrics_port else ""
        made.append(with_nodes(daemon, nodes, listen))
        return daemon

    yield make
    for daemon in made:
        daemon.kill_all()


def records(path: Path) -> list[tuple[int, int, float, float]]:
    """The handler's lines: (job id, pid, start, end)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        job_id, pid, start, end = line.split(",")
        out.append((int(job_id), int(pid), float(start), float(end)))
    return out


def assert_never_twice_at_once(lines: list[tuple[int, int, float, float]]) -> None:
    by_job: dict[int, list[tuple[float, float]]] = {}
    for job_id, _, start, end in lines:
        by_job.setdefault(job_id, []).append((start, end))
    for job_id, runs in by_job.items():
        runs.sort()
        for (_, end), (start, _) in itertools.pairwise(runs):
            assert start >= end, f"job {job_id} ran in two workers at once: {runs}"


def job_states(cluster: GaleraCluster, node: int) -> dict[int, tuple[str, int]]:
    rows = cluster.nodes[node].admin("SELECT id, status, attempts FROM forkq.forkq_jobs")
    return {int(r[0]): (str(r[1]), int(r[2])) for r in rows}


def forkq_sessions(cluster: GaleraCluster, node: int) -> int:
    rows = cluster.nodes[node].admin(
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'forkq'"
    )
    return int(rows[0][0])


def test_node_1_killed_mid_drain(cluster: GaleraCluster, make_daemon: Any, tmp_path: Path) -> None:
    out = tmp_path / "runs.txt"
    total = 300
    queue = Queue(cluster.urls, wake=False)
    job = {"handler": "t.record", "payload": {"file": str(out), "seconds": 0.05}, "queue": "work"}
    daemon = make_daemon(cluster.urls, "drain", workers=3).start().wait_ready(timeout=60)
    ids = queue.enqueue_many([job] * total)
    assert forkq_sessions(cluster, 0) > 0 and forkq_sessions(cluster, 1) == 0

    wait_until(lambda: len(records(out)) >= total // 3, timeout=120, message="a third done")
    killed_at = time.time()
    cluster.nodes[0].kill9()
    queue.store.close()  # the producer's session too: its next statement finds node 2

    def all_done() -> bool:
        states = job_states(cluster, 1)
        return len(states) == total and all(s == "done" for s, _ in states.values())

    wait_until(all_done, timeout=180, interval=0.5, message="every job done after the kill")
    lines = records(out)
    assert {job_id for job_id, *_ in lines} == set(ids)  # every job ran
    assert_never_twice_at_once(lines)
    starts = sorted(start for _, _, start, _ in lines)
    assert starts[-1] > killed_at, "nothing ran after the kill: the drain ended first"
    near = [s for s in starts if killed_at - 1 <= s <= killed_at + 30]
    pause = max(b - a for a, b in itertools.pairwise(near))
    again = len(lines) - total  # run again: their outcome was lost with node 1
    print(
        f"\nGalera failover: job starts paused {pause:.2f}s around the kill of node 1;"
        f" {again} of {total} jobs ran a second time (outcome lost with node 1)"
    )
    assert daemon.alive() and forkq_sessions(cluster, 1) > 0
    check = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "-c", str(daemon.config_path)],
        env=daemon.environment(), cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    node_2 = f":{cluster.nodes[1].port}/forkq: Synced, the writer"
    assert node_2 in check.stdout and "(2003)" in check.stdout, check.stdout  # node 1: down
    assert queue.enqueue("t.record", {"file": os.devnull}, queue="work") > max(ids)

    # Node 1 back and Synced: the daemon's sessions go back to it (galera.NODE_RECHECK).
    node_1 = f":{cluster.nodes[0].port}/"
    moved_away = daemon.events(events.DB_NODE_CHANGED)  # logged by each process that moved
    assert moved_away and all(node_1 in e["was"] and node_1 not in e["node"] for e in moved_away)
    cluster.start_node(cluster.nodes[0])
    queue.enqueue("t.record", {"file": os.devnull}, queue="work")
    wait_until(
        lambda: forkq_sessions(cluster, 0) > 0,
        timeout=90,
        interval=0.5,
        message="the daemon back on node 1",
    )
    # A session on node 1 may be a process that opened it fresh (no move to log); the
    # others look back within NODE_RECHECK, so the event may come that much later.
    back = wait_until(
        lambda: [e for e in daemon.events(events.DB_NODE_CHANGED) if node_1 in e["node"]],
        timeout=3 * NODE_RECHECK,
        interval=0.5,
        message="a db_node_changed event back to node 1",
    )
    assert all(node_1 not in e["was"] for e in back), back
    assert daemon.stop() == 0, daemon.describe()


def scrape_conflicts(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    values = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("forkq_db_conflicts_total ")
    ]
    assert values, "forkq_db_conflicts_total is not exported"
    return sum(values)


def test_one_queue_claimed_through_two_nodes(
    cluster: GaleraCluster, make_daemon: Any, tmp_path: Path
) -> None:
    out = tmp_path / "runs.txt"
    total = 1500
    urls = cluster.urls
    ports = [free_tcp_port(), free_tcp_port()]
    first = make_daemon(urls, "via1", workers=3, metrics_port=ports[0])
    second = make_daemon([urls[1], urls[0], urls[2]], "via2", workers=3, metrics_port=ports[1])
    first.start(), second.start()
    first.wait_ready(timeout=60), second.wait_ready(timeout=60)
    # Enqueued once both claim: enqueued before, the daemon up first could drain it all
    # alone (1,500 quick jobs take about a second), with no race for the nodes to settle.
    queue = Queue(cluster.urls, wake=False)
    job = {"handler": "t.record", "payload": {"file": str(out)}, "queue": "work"}
    ids = queue.enqueue_many([job] * total)

    def all_done() -> bool:
        states = job_states(cluster, 2)
        return len(states) == total and all(s == "done" for s, _ in states.values())

    wait_until(all_done, timeout=180, interval=0.5, message="every job done")
    lines = records(out)
    assert sorted(job_id for job_id, *_ in lines) == sorted(ids)  # each exactly once
    assert {a for _, a in job_states(cluster, 2).values()} == {1}  # no attempt lost
    conflicts = scrape_conflicts(ports[0]) + scrape_conflicts(ports[1])
    pids_first = {p.pid for p in first.children()}
    ran_by_first = sum(1 for _, pid, *_ in lines if pid in pids_first)
    print(
        f"\nTwo writer nodes: {total} jobs, {conflicts:g} conflicts retried,"
        f" {ran_by_first} ran through node 1, {total - ran_by_first} through node 2"
    )
    assert conflicts > 0
    assert forkq_sessions(cluster, 0) > 0 and forkq_sessions(cluster, 1) > 0
    assert first.stop() == 0 and second.stop() == 0


def test_a_conflict_at_commit_is_a_lost_race_run_again(cluster: GaleraCluster) -> None:
    """Node 2 commits a change to a row node 1's transaction changed but did not commit:
    node 1's COMMIT fails certification (1213). The store runs the transaction again,
    the caller never sees the error, and the conflict is counted."""
    first, second = open_store(cluster.urls[0]), open_store(cluster.urls[1])
    first.set_paused("q", False)
    counted: list[int] = []
    core.conflict_listeners.append(lambda: counted.append(1))
    runs: list[str] = []

    def attempt() -> int:
        runs.append("body")
        try:
            with first.transaction():
                first.statement("set_paused", first.bind(queue="q", paused=1))
                if len(runs) == 1:
                    second.set_paused("q", False)  # committed first, through node 2
                runs.append("commit")
        except TransientDatabaseError as exc:
            runs.append(f"failed: {exc}")
            raise
        return len(runs)

    try:
        first.retrying(attempt)
    finally:
        core.conflict_listeners.pop()
        first.close(), second.close()
    assert runs[:2] == ["body", "commit"], runs  # the first run's body went through ...
    assert runs[2].startswith("failed: (1213)"), runs  # ... and its COMMIT failed
    assert runs[-2:] == ["body", "commit"], runs  # run again, and committed
    # A run again can lose to the same write once more, while node 1 still applies it
    # (Galera applies another node's write set after it certified): each loss is a 1213,
    # run again and counted; the caller sees none.
    failures = [r for r in runs if r.startswith("failed")]
    assert all(r.startswith("failed: (1213)") for r in failures), runs
    assert len(runs) == 3 * len(failures) + 2 and counted == [1] * len(failures), runs
    paused = "SELECT paused FROM forkq.forkq_queues WHERE queue = 'q'"
    wait_until(lambda: cluster.nodes[2].admin(paused) == [(1,)], message="node 3 applied it")


def test_a_node_hides_an_abort_inside_a_packet_of_statements(cluster: GaleraCluster) -> None:
    """Why forkq sends one statement a packet to a Galera node (mysql_session.packs): when
    another node's write aborts a transaction while a statement of a multi-statement
    packet runs, the node says nothing; the statements after it run outside the
    transaction, and a COMMIT among them answers OK. Should a MariaDB release tell the
    abort, this fails, and the packets may be shared again."""
    one, two = (
        pymysql.connect(
            unix_socket=node.socket, user="root", password="", database="forkq",
            autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS,
        )
        for node in cluster.nodes[:2]
    )  # fmt: skip
    try:
        with one.cursor() as cursor:
            cursor.execute("CREATE TABLE packet_abort (id INT PRIMARY KEY, v INT)")
            cursor.execute("INSERT INTO packet_abort VALUES (1, 0), (2, 0)")
        wait_until(
            lambda: cluster.nodes[1].admin("SELECT COUNT(*) FROM forkq.packet_abort") == [(2,)]
        )
        with one.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM packet_abort FOR UPDATE")
            # The sleep stands for the moment between two statements of one packet.
            cursor.execute("UPDATE packet_abort SET v = 100; DO SLEEP(2); COMMIT")
            # The UPDATE has answered; wait until the packet is inside its sleep.
            sleeping = "SELECT STATE FROM information_schema.PROCESSLIST WHERE ID = %s"
            wait_until(
                lambda: cluster.nodes[0].admin(sleeping, (one.thread_id(),)) == [("User sleep",)]
            )
            with two.cursor() as other:
                other.execute("UPDATE packet_abort SET v = 7 WHERE id = 1")  # commits first
            while cursor.nextset():  # the sleep and the COMMIT: both answer OK
                pass
        rows = cluster.nodes[0].admin("SELECT id, v FROM forkq.packet_abort ORDER BY id")
        assert rows == [(1, 7), (2, 0)], rows  # yet node 1 committed nothing of it
    finally:
        with one.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS packet_abort")
        one.close(), two.close()


def test_each_statement_goes_alone_to_a_galera_node(cluster: GaleraCluster) -> None:
    """A claim that writes successes (the fused read, the UPDATE and its COMMIT, one packet
    each on a plain server's two round trips) sends every statement alone to a Galera
    node (its BEGIN aside): one statement a query in the general log. A worker's look at what it
    holds first waits for the writes the cluster ordered before it (wsrep_sync_wait)."""
    queue = Queue(cluster.urls[0], wake=False)
    store = open_store(cluster.urls[0])
    node = cluster.nodes[0]
    try:
        queue.enqueue_many([{"handler": "t.noop", "payload": {}, "queue": "q"}] * 4)
        first, _ = store.complete_and_claim({}, "q", "galera-owner", 2, 60)
        assert len(first) == 2
        node.admin("SET GLOBAL log_output = 'TABLE', general_log = 1")  # only the store talks
        try:
            done = {"delete": [job.id for job in first]}
            second, written = store.complete_and_claim(done, "q", "galera-owner", 2, 60)
            held = store.held_by("galera-owner")  # waits for the cluster's earlier writes
        finally:
            node.admin("SET GLOBAL general_log = 0")
        assert len(second) == 2 and written == 2
        sent = [
            str(text)
            for (text,) in node.admin(
                "SELECT CONVERT(argument USING utf8mb4) FROM mysql.general_log"
                " WHERE user_host LIKE 'forkq%' AND command_type = 'Query'"
            )
        ]
        alone = [text.removeprefix("BEGIN;").strip().rstrip(";") for text in sent]
        assert sent and all(";" not in text for text in alone), sent  # BEGIN with the first
        assert any(text.strip().upper() == "COMMIT" for text in sent), sent
        assert [job.id for job in held] == [job.id for job in second]
        assert any(text.startswith("SET STATEMENT wsrep_sync_wait = 1 FOR") for text in sent)
    finally:
        node.admin("TRUNCATE TABLE mysql.general_log")
        store.close(), queue.close()
