"""Section galera (MariaDB only): a drain through a 3-node Galera cluster's writer node
against a standalone server, and the failover time under load (issue 24).

Both on this machine, started by the section: a standalone private `mariadbd`
(tests/private_mariadb.py) and a private 3-node cluster (tests/private_galera.py, the
three nodes on the same 2 cores: every write is applied by all three). One `forkq run`
(W = 4, queue "gal") on each, in turns, RUNS rounds; each round times a drain of N
no-op jobs from the enqueue to the last row gone. The ratio is cluster / standalone,
the median of the rounds'.

Failover: a daemon on the cluster (`[database] nodes`, node 1 first) drains `t.record`
jobs of 5 ms; node 1 is killed -9 a third of the way in. The figure is the longest pause
between two job starts around the kill (the cluster declares the node gone after
evs.suspect_timeout, 3 s in this cluster; Galera's default is 5 s), and how many jobs
started more than 30 s after it: those of a claim whose COMMIT reached the cluster while
its answer was lost with node 1, run once the lease of the worker that never knew it
had them expires.

    .venv/bin/python benchmarks/run.py --backends mariadb --sections galera --no-write
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Any

from private_galera import GaleraCluster, with_nodes
from private_mariadb import PrivateMariaDB
from scale_env import daemon, read_records, running

from supervisor import Queue

QUEUE = "gal"
RUNS = 3
WORKERS = 4
JOBS = 3000
FAILOVER_JOBS = 1500
LEASE_WAIT = 30.0  # seconds: a job started later than this after the kill waited for a lease
FAILOVER_PAUSE_MOST = 10.0  # seconds: the suspect timeout (3 s) and a reconnect, with room
POOL = {QUEUE: {"workers": WORKERS, "max_workers": WORKERS, "timeout": 60}}


def remaining(node: PrivateMariaDB) -> int:
    rows = node.admin(f"SELECT COUNT(*) FROM `{node.database}`.forkq_jobs")
    return int(rows[0][0])


def drain(made: Any, producer: Queue, reader: PrivateMariaDB, deadline: Any) -> float:
    """Seconds from the enqueue of JOBS no-op jobs to the last row gone."""
    job = {"handler": "t.noop", "payload": {}, "queue": QUEUE}
    started = time.monotonic()
    for start in range(0, JOBS, 1000):
        producer.enqueue_many([job] * min(1000, JOBS - start))
    while remaining(reader):
        if not made.alive():
            raise RuntimeError(f"daemon exited: {made.describe()[-400:]}")
        deadline.check("waiting for the drain")
        time.sleep(0.02)
    return time.monotonic() - started


def run(bench: Any, deadline: Any) -> None:
    if bench.b.name != "mariadb":
        return
    alone, cluster = PrivateMariaDB(), GaleraCluster()
    try:
        alone.start()
        alone.setup_forkq()
        cluster.start()
        _drains(bench, alone, cluster, deadline)
        _failover(bench, cluster, deadline)
    finally:
        cluster.destroy()
        alone.destroy()


def _drains(bench: Any, alone: PrivateMariaDB, cluster: GaleraCluster, deadline: Any) -> None:
    single = daemon(bench.workdir, alone.url, "galera-standalone", POOL)
    nodes = with_nodes(daemon(bench.workdir, cluster.urls[0], "galera-writer", POOL), cluster.urls)
    kinds = [(single, Queue(alone.url, wake=False), alone)]
    kinds.append((nodes, Queue(cluster.urls, wake=False), cluster.nodes[1]))  # read elsewhere
    times: dict[str, list[float]] = {"standalone": [], "galera": []}
    for _ in range(RUNS):
        for (made, producer, reader), label in zip(kinds, times, strict=True):
            with running(made, ready_timeout=60):
                drain(made, producer, reader, deadline)  # warm: connections, buffer pool
                times[label].append(drain(made, producer, reader, deadline))
    for _, producer, _ in kinds:
        producer.close()
    rates = {label: [JOBS / t for t in runs] for label, runs in times.items()}
    ratios = [g / s for g, s in zip(rates["galera"], rates["standalone"], strict=True)]
    note = f"N={JOBS} t.noop, W={WORKERS}, {RUNS} rounds in turns, median"
    bench.fig("galera", "drain, standalone server", statistics.median(rates["standalone"]),
              "jobs/s", note=note)  # fmt: skip
    bench.fig("galera", "drain, 3-node Galera writer", statistics.median(rates["galera"]),
              "jobs/s", note=note)  # fmt: skip
    bench.fig("galera", "drain, Galera ÷ standalone", statistics.median(ratios), "x",
              note="three nodes on the same 2 cores; availability, not capacity")  # fmt: skip


def _failover(bench: Any, cluster: GaleraCluster, deadline: Any) -> None:
    cluster.empty_tables()
    record = bench.workdir / "galera-failover.rec"
    made = with_nodes(daemon(bench.workdir, cluster.urls[0], "galera-failover", POOL), cluster.urls)
    producer = Queue(cluster.urls, wake=False)
    job = {
        "handler": "t.record",
        "payload": {"file": str(record), "seconds": 0.005},
        "queue": QUEUE,
    }
    with running(made, ready_timeout=60):
        producer.enqueue_many([job] * FAILOVER_JOBS)
        producer.close()
        while len(read_records(record)) < FAILOVER_JOBS // 3:
            deadline.check("waiting for a third of the jobs")
            time.sleep(0.01)
        killed_at = time.time()
        cluster.nodes[0].kill9()
        while remaining(cluster.nodes[1]) or len(read_records(record)) < FAILOVER_JOBS:
            deadline.check("waiting for the drain after the kill")
            time.sleep(0.05)
    starts = sorted(start for _, start, _ in read_records(record).values())
    _failover_figures(bench, starts, killed_at)


def _failover_figures(bench: Any, starts: list[float], killed_at: float) -> None:
    """The pause in job starts the kill caused; and the jobs whose claim committed on
    the cluster while its answer was lost with node 1: they wait out their lease."""
    near = [s for s in starts if killed_at - 1 <= s <= killed_at + LEASE_WAIT]
    stall = max((b - a for a, b in itertools.pairwise(near)), default=0.0)
    late = [s - killed_at for s in starts if s > killed_at + LEASE_WAIT]
    note = f"N={FAILOVER_JOBS} t.record 5 ms, W={WORKERS}, node 1 killed -9 a third in"
    # The cluster's own pause is its suspect timeout (3 s) and the reconnect; a lost
    # claim's jobs waiting for their lease (timeout + margin, 30 s and more) is a defect.
    bench.fig("galera", "failover: longest pause in job starts", stall, "s", note=note,
              target=("<=", FAILOVER_PAUSE_MOST))  # fmt: skip
    bench.fig("galera", "failover: jobs waiting out a lost claim's lease", len(late), "jobs",
              note=f"last started {max(late):.0f} s after the kill" if late else "none",
              target=("<=", 0.0))  # fmt: skip


METHOD = [
    "- **galera** (MariaDB only): a standalone private `mariadbd` and a private 3-node Galera"
    " cluster (tests/private_galera.py: rsync SST, evs.suspect_timeout 3 s), all on this"
    " machine. One `forkq run` (W=4) on each in turns, 3 rounds, each a warm-up drain then a"
    " timed drain of 3,000 `t.noop` from the enqueue to the last row gone; the ratio is the"
    " median of the rounds'. Failover: 1,500 `t.record` jobs of 5 ms through `[database]"
    " nodes` (node 1 first), node 1 killed -9 a third in; the longest pause between two job"
    " starts around the kill, and the jobs started more than 30 s after it (a claim whose"
    " answer was lost with node 1: they wait for the lease).",
]
