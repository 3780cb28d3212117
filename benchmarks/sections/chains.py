"""Section chains: a chain of 1,000 jobs (`q.chain`, each waiting on the one before it) run
by the real daemon (W = 2): per-step latency, from a parent's handler ending to its
child's handler starting, p50 and p99. The baseline, in the same run: the same 1,000 jobs
without dependencies, and for each job the gap from the end of the job its worker ran
before it to its own start (what a worker pays between two jobs anyway)."""

from __future__ import annotations

import statistics
from itertools import pairwise

from harness import Bench, BenchDaemon, Deadline, wait_for

from supervisor import Queue

STEPS = 1000
WORKERS = 2
STEP_P50_MOST = 20.0  # ms: well under the daemon's poll interval


def run(bench: Bench, deadline: Deadline) -> None:
    bench.b.reset()
    chain = _gaps(bench, deadline, chained=True)
    bench.b.reset()
    plain = _gaps(bench, deadline, chained=False)
    bench.b.reset()
    note = f"chain of {STEPS}, W={WORKERS}; baseline: the same jobs without dependencies"
    for label, n in (("p50", 49), ("p99", 98)):
        step = statistics.quantiles(chain, n=100, method="inclusive")[n]
        gap = statistics.quantiles(plain, n=100, method="inclusive")[n]
        bench.fig(
            "chains",
            f"step latency {label} (parent end → child start)",
            step,
            "ms",
            note=note,
            # The worker that ends a parent claims its child in that transaction: a typical
            # step never waits for the poll (50 ms). It did once, unnoticed: 49.9 ms.
            target=("<=", STEP_P50_MOST) if label == "p50" else None,
        )
        bench.fig("chains", f"baseline gap between two jobs {label}", gap, "ms")
    bench.fig("chains", "step latency max", max(chain), "ms")


def _gaps(bench: Bench, deadline: Deadline, *, chained: bool) -> list[float]:
    """Milliseconds: each step's parent end → child start (chained), or each job's previous
    job on the same worker end → its start (plain)."""
    tag = "chain" if chained else "plain"
    q = Queue(bench.b.admin_url)
    try:
        q.enqueue("bench.noop", {"warm": True}, delay=3600)  # connect outside the clock
        with BenchDaemon(bench.workdir, bench.b.daemon_url, WORKERS, tag) as daemon:
            daemon.start()
            wait_for(daemon.all_idle, deadline, "idle children")
            specs = [q.job("bench.work", {"s": 0, "i": i}) for i in range(STEPS)]
            ids = (
                q.chain(specs)
                if chained
                else q.enqueue_many([{"handler": s.handler, "payload": s.payload} for s in specs])
            )
            runs: dict[int, tuple[float, float, str]] = {}

            def all_ran() -> bool:
                daemon.check_alive()
                if daemon.stamp_file.exists():
                    for line in daemon.stamp_file.read_text().splitlines():
                        job, start, end, pid = line.split()
                        runs[int(job)] = (float(start), float(end), pid)
                return len(runs) >= STEPS

            wait_for(all_ran, deadline, f"every {tag} job", interval=0.1)
    finally:
        q.close()
    if chained:
        return [(runs[b][0] - runs[a][1]) * 1000 for a, b in pairwise(ids)]
    by_start = sorted(runs.values())
    gaps = []
    for pid in {r[2] for r in by_start}:
        mine = [r for r in by_start if r[2] == pid]
        gaps += [(b[0] - a[1]) * 1000 for a, b in pairwise(mine)]
    return gaps


METHOD = [
    "- **chains**: `q.chain` of 1,000 `bench.work` jobs (s = 0: they stamp start and end) on an"
    " idle daemon (W=2); step latency = a child's start stamp minus its parent's end stamp"
    " (the parent's success written, the child released in that transaction, claimed and"
    " started). Baseline in the same run: the same 1,000 jobs enqueued without dependencies;"
    " for each job, its start minus the end of the job its worker ran before it.",
]
