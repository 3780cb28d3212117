"""Section mixed: real work is mixed, and a quick job must never wait behind a slow one
while a worker of its pool is free (issue 20). W = 4, `bench.work` jobs that sleep.

(a) interleaved: after a warm-up of quick jobs (so children claim in batches), rounds of
    two slow jobs (fewer than the workers), each followed by six quick ones. The figure
    is the worst quick job's wait from its enqueue to its handler's start.
(b) heavy tail: 5,000 jobs, 94% ~1 ms, 5% ~50 ms, 1% ~2 s, shuffled (fixed seed), all
    enqueued at once on an idle daemon. The makespan against its lower bound
    max(total work / W, longest job) from the handlers' own clocks; the waits against
    what one global FIFO served by W workers (list scheduling in enqueue order, with the
    durations the handlers measured, each job ready when its `enqueue_many` returned)
    would give each job; statements per job. Where the gap comes from: the workers'
    idle time (not running a handler) ÷ W, before their first job and between jobs,
    after a quick job and after a slow one (the hand-back and the claim after it).
"""

from __future__ import annotations

import heapq
import itertools
import random
import statistics
import time

from harness import Bench, BenchDaemon, Deadline, wait_for

from supervisor import Queue

WORKERS = 4
SLOW = 2.0  # seconds, in (a)
ROUNDS = 3  # of (a)
TAIL = [(0.94, 0.001), (0.05, 0.050), (0.01, 2.0)]  # (share, seconds) in (b)


def stamps(daemon: BenchDaemon) -> dict[int, tuple[float, float, int]]:
    """job id -> (start, end, child pid), as bench.work wrote them."""
    found: dict[int, tuple[float, float, int]] = {}
    if daemon.stamp_file.exists():
        for line in daemon.stamp_file.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                found[int(parts[0])] = (float(parts[1]), float(parts[2]), int(parts[3]))
    return found


def run(bench: Bench, deadline: Deadline) -> None:
    bench.b.reset()
    q = Queue(bench.b.admin_url)
    try:
        q.enqueue("bench.noop", {"warm": True}, delay=3600)  # connect outside the clock
        with BenchDaemon(bench.workdir, bench.b.daemon_url, WORKERS, "mixed") as daemon:
            daemon.start()
            wait_for(daemon.all_idle, deadline, "idle children")
            interleaved(bench, q, daemon, deadline)
            heavy_tail(bench, q, daemon, deadline)
    finally:
        q.close()
    bench.b.reset()


def interleaved(bench: Bench, q: Queue, daemon: BenchDaemon, deadline: Deadline) -> None:
    slow = {"handler": "bench.work", "payload": {"s": SLOW}}
    quick = {"handler": "bench.work", "payload": {"s": 0}}
    enqueued: dict[int, float] = {}
    slow_ids: set[int] = set()
    for _ in range(ROUNDS):
        bench.enqueue_jobs(2000)  # the warm-up: children grow their batches on quick jobs
        wait_for(lambda: bench.b.count() <= 1, deadline, "the warm-up drained")
        time.sleep(0.3)
        at = time.time()
        ids = q.enqueue_many([slow, *[quick] * 6, slow, *[quick] * 6])
        slow_ids.update({ids[0], ids[7]})
        enqueued.update({job_id: at for job_id in ids})
        wait_for(lambda: len(stamps(daemon)) >= len(enqueued), deadline, "round done", 0.1)
    seen = stamps(daemon)
    waits = [seen[j][0] - enqueued[j] for j in enqueued if j not in slow_ids]
    note = f"{ROUNDS} rounds of 2 slow ({SLOW:g} s) + 12 quick after 2,000 quick, W={WORKERS}"
    bench.fig(
        "mixed",
        "(a) interleaved: worst quick job's wait, enqueue → start",
        max(waits) * 1000,
        "ms",
        target=("<=", 100.0),
        note=note,
    )
    bench.fig(
        "mixed", "(a) interleaved: median quick job's wait", statistics.median(waits) * 1000, "ms"
    )


def heavy_tail(bench: Bench, q: Queue, daemon: BenchDaemon, deadline: Deadline) -> None:
    n = bench.s.mixed_jobs
    rng = random.Random(20)
    specs = []
    for share, seconds in TAIL:
        specs += [{"handler": "bench.work", "payload": {"s": seconds}}] * round(n * share)
    rng.shuffle(specs)
    daemon.stamp_file.unlink(missing_ok=True)
    before = bench.b.counters()
    at = time.time()
    ids: list[int] = []
    ready: list[float] = []  # when each job was committed, as far as the producer knows
    for start in range(0, len(specs), 1000):
        ids += q.enqueue_many(specs[start : start + 1000])
        ready += [time.time() - at] * (len(ids) - len(ready))
    wait_for(lambda: len(stamps(daemon)) >= len(ids), deadline, "the heavy tail done", 0.2)
    after = bench.b.counters()
    seen = stamps(daemon)
    durations = [seen[j][1] - seen[j][0] for j in ids]
    makespan = max(end for _, end, _ in seen.values()) - at
    bound = max(sum(durations) / WORKERS, max(durations))
    waits = sorted(seen[j][0] - at for j in ids)
    fifo = sorted(list_scheduling(durations, WORKERS, ready))
    pct = statistics.quantiles(waits, n=100, method="inclusive")
    ideal = statistics.quantiles(fifo, n=100, method="inclusive")
    note = f"n={len(ids):,}: 94% 1 ms, 5% 50 ms, 1% 2 s, shuffled, W={WORKERS}"
    bench.fig(
        "mixed",
        "(b) heavy tail: makespan ÷ max(work / W, longest job)",
        makespan / bound,
        "x",
        target=("<=", 1.15),
        note=f"{note}; makespan {makespan:.1f} s, bound {bound:.1f} s",
    )
    bench.fig(
        "mixed", "(b) heavy tail: wait p50", pct[49], "s", note=f"global FIFO: {ideal[49]:.2f} s"
    )
    bench.fig(
        "mixed",
        "(b) heavy tail: wait p99 minus global FIFO's p99",
        pct[98] - ideal[98],
        "s",
        target=("<=", 0.5),
        note=f"p99 {pct[98]:.2f} s, global FIFO {ideal[98]:.2f} s",
    )
    if before is not None and after is not None:
        per_job = (after["statements"] - before["statements"]) / len(ids)
        bench.fig("mixed", "(b) heavy tail: statements per job", per_job, "")
    idle, children = idle_time(seen, at)
    for what, seconds in idle.items():
        bench.fig(
            "mixed",
            f"(b) heavy tail: workers' idle time ÷ W, {what}",
            seconds / WORKERS,
            "s",
            note=f"{children} children (recycled at max_jobs_per_child)" if "first" in what else "",
        )


def idle_time(seen: dict[int, tuple[float, float, int]], at: float) -> tuple[dict[str, float], int]:
    """The seconds the children spent not running a handler, by where: before the first
    W children's first job, and between two jobs of one child after a quick one and after
    a slow one (>= 40 ms: the master has handed back what it held, so it claims again)."""
    by_child: dict[int, list[tuple[float, float]]] = {}
    for start, end, pid in seen.values():
        by_child.setdefault(pid, []).append((start, end))
    runs = sorted(sorted(jobs) for jobs in by_child.values())
    idle = {"before the first job": sum(jobs[0][0] - at for jobs in runs[:WORKERS])}
    idle["between jobs, after a quick one"] = idle["between jobs, after a slow one"] = 0.0
    for jobs in runs:
        for (start, end), (following, _) in itertools.pairwise(jobs):
            slow = end - start >= 0.04
            idle[f"between jobs, after a {'slow' if slow else 'quick'} one"] += following - end
    return idle, len(runs)


def list_scheduling(
    durations: list[float], workers: int, ready: list[float] | None = None
) -> list[float]:
    """Each job's wait under one global FIFO served by `workers`: in enqueue order, each
    job starts on the worker that frees first, not before it is ready."""
    free = [0.0] * workers
    waits = []
    for i, duration in enumerate(durations):
        start = max(heapq.heappop(free), ready[i] if ready else 0.0)
        waits.append(start)
        heapq.heappush(free, start + duration)
    return waits


METHOD = [
    "- **mixed**: one pool of W=4 `bench.work` children (each job sleeps its length, then"
    " appends its own start and end, from `time.time()`, to a stamp file). (a) Three rounds:"
    " 2,000 quick jobs (the children's batches grow), then in one `enqueue_many` a 2 s job,"
    " six 0 s jobs, a 2 s job and six 0 s jobs; the figure is the worst quick job's start"
    " minus the time just before its `enqueue_many`. (b) 5,000 jobs (94% 1 ms, 5% 50 ms,"
    " 1% 2 s, shuffled with a fixed seed) enqueued at once on the idle daemon: the makespan"
    " (last end minus enqueue) over max(sum of measured durations / W, the longest), and the"
    " waits against list scheduling of the same measured durations in enqueue order on W"
    " workers, each job ready when its `enqueue_many` of 1,000 returned; the children's idle"
    " time ÷ W before their first job and between jobs (after a quick one, after one of"
    " 40 ms or more), from the stamps' pids. Statements per job from MariaDB's per-user counters.",
]
