"""Section latency: enqueue → handler start on an idle daemon (W = 2), 200 `bench.stamp`
jobs 20 ms apart."""

from __future__ import annotations

import statistics
import time

from harness import Bench, BenchDaemon, Deadline, wait_for

from supervisor import Queue


def run(bench: Bench, deadline: Deadline) -> None:
    s = bench.s
    bench.b.reset()
    q = Queue(bench.b.admin_url)
    enqueued: dict[int, float] = {}
    try:
        q.enqueue("bench.noop", {"warm": True}, delay=3600)  # connect outside the clock
        with BenchDaemon(bench.workdir, bench.b.daemon_url, 2, "latency") as daemon:
            daemon.start()
            wait_for(daemon.all_idle, deadline, "two idle children")
            time.sleep(1.0)
            origin = time.monotonic()
            for i in range(s.latency_jobs):
                pause = origin + i * s.latency_gap - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                t = time.time()
                enqueued[q.enqueue("bench.stamp", {"i": i})] = t
            stamps: dict[int, float] = {}

            def all_stamped() -> bool:
                daemon.check_alive()
                if daemon.stamp_file.exists():
                    for line in daemon.stamp_file.read_text().splitlines():
                        job, _, when = line.partition(" ")
                        stamps[int(job)] = float(when)
                return len(stamps) >= len(enqueued)

            wait_for(all_stamped, deadline, "every stamp", interval=0.1)
    finally:
        q.close()
    lat = sorted((stamps[j] - enqueued[j]) * 1000 for j in enqueued)
    pct = statistics.quantiles(lat, n=100, method="inclusive")
    note = f"n={len(lat)}, {s.latency_gap * 1000:.0f} ms apart, W=2"
    bench.fig(
        "latency", "enqueue → handler start p50", pct[49], "ms", target=("<=", 50.0), note=note
    )
    bench.fig("latency", "enqueue → handler start p95", pct[94], "ms")
    bench.fig("latency", "enqueue → handler start p99", pct[98], "ms", target=("<=", 150.0))
    bench.fig("latency", "enqueue → handler start max", lat[-1], "ms")
    bench.b.reset()


METHOD = [
    "- **latency**: an idle daemon (W=2, default poll_interval 50 ms); the bench enqueues one job"
    " every 20 ms and notes `time.time()` just before each `enqueue`; `bench.stamp` appends"
    " `job.id time.time()` as its first act. Latency = stamp - enqueue time.",
]
