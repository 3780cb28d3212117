"""Section memory: the master's RSS and each child's USS after 10,000 jobs drained by
W = 4 children that are never recycled."""

from __future__ import annotations

import time

from harness import Bench, BenchDaemon, Deadline, wait_for


def run(bench: Bench, deadline: Deadline) -> None:
    n = bench.s.memory_jobs
    bench.b.reset()
    bench.enqueue_jobs(n)
    # Children must live through the whole run to show growth: no recycling here.
    with BenchDaemon(
        bench.workdir, bench.b.daemon_url, 4, "memory", max_jobs_per_child=10 * n
    ) as daemon:
        daemon.start()
        wait_for(
            lambda: daemon.check_alive() or bench.b.count() == 0, deadline, f"{n} jobs done", 0.1
        )
        wait_for(daemon.all_idle, deadline, "idle children")
        time.sleep(0.5)
        master = daemon.master()
        rss = master.memory_info().rss / 2**20
        master_uss = master.memory_full_info().uss / 2**20
        kids = [
            (k.memory_full_info().uss / 2**20, k.memory_info().rss / 2**20)
            for k in daemon.pool_workers()
        ]
    uss = [u for u, _ in kids]
    bench.fig(
        "memory",
        f"master RSS after {n:,} jobs (W=4)",
        rss,
        "MiB",
        target=("<=", 40.0),
        note=f"master USS {master_uss:.1f} MiB",
    )
    bench.fig(
        "memory",
        "child USS, largest of 4",
        max(uss),
        "MiB",
        target=("<=", 15.0),
        note="USS "
        + ", ".join(f"{u:.1f}" for u in uss)
        + "; RSS "
        + ", ".join(f"{r:.1f}" for _, r in kids),
    )
    bench.b.reset()


METHOD = [
    "- **memory**: 10,000 jobs drained by W=4 (children not recycled), then psutil"
    " `memory_info().rss` of the master and `memory_full_info().uss` of each child.",
]
