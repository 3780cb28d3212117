"""Section drain: N no-op jobs worked off by the real daemon (`python -m supervisor run`)
with one pool of W = 2 and W = 4 children, against raw-SQL loops (benchmarks/baseline.py:
SKIP LOCKED, seed 001's partition locks, SQLite), the loop also run as a program of its
own and timed exactly like the daemon. `forkq_drain` is the lab's drain too."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import replace

import baseline
from backends import MySQLBackend
from harness import (
    BENCH_DIR,
    PARTITIONS,
    POLL,
    QUEUE,
    Bench,
    BenchDaemon,
    Deadline,
    _children_cpu,
    _cost_note,
    _median_run,
    _num,
    _per_job,
    _rates,
)
from util import dies_with_us

from supervisor.dburl import parse_database_url
from supervisor.store import open_store

# Transactions left for InnoDB's purge before a drain starts: a drain's claims step over
# the delete-marked entries of the one before (another contender's, too) until they are
# purged, which made one contender's figures depend on the one that ran before it.
SETTLED = 50


def forkq_drain(bench: Bench, workers: int, deadline: Deadline, tag: str) -> dict[str, float]:
    """One drain of N no-op jobs by the real daemon; rates and server-side costs."""
    n = bench.s.drain_jobs
    bench.b.reset()
    bench.enqueue_jobs(n)
    bench.b.settle(deadline, history=SETTLED, dirty=False)
    title = f"claim_select with {n:,} ready rows (what each drain claim runs)"
    if f"{bench.b.name}: {title}" not in bench.report.plans:
        store = open_store(bench.b.admin_url)
        try:
            params = {"queue": QUEUE, "limit": 20, "now": time.time()}
            bench.plan(bench.b, store, title, "claim_select", params)
        finally:
            store.close()
    before = bench.b.counters()
    cpu_before = _children_cpu()
    timeline: list[tuple[float, int]] = []
    with BenchDaemon(bench.workdir, bench.b.daemon_url, workers, tag, **bench.pool) as daemon:
        daemon.extra_env.update(bench.daemon_env)
        if bench.daemon_command:
            daemon.command = bench.daemon_command  # the lab's wrapper instead of -m supervisor
        daemon.start()
        while True:
            left = bench.b.count()
            timeline.append((time.perf_counter(), left))
            if left == 0:
                break
            daemon.check_alive()
            deadline.check(f"draining {n} jobs with W={workers}")
            time.sleep(POLL)
        after = bench.b.counters()
    cpu = _children_cpu() - cpu_before  # the daemon has been waited for: all of its tree
    out = _rates(timeline, daemon.started, n)
    out["client_cpu_us_per_job"] = cpu / n * 1e6
    out.update(_per_job(before, after, n))
    return out


def baseline_program(
    bench: Bench, variant: str, workers: int, deadline: Deadline, batch: int = 20
) -> dict[str, float]:
    """The raw loop as a program of its own, timed exactly like the daemon: from launch
    (interpreter, imports, fork, connect) to the last row gone, by the same poller."""
    n = bench.s.drain_jobs
    url = parse_database_url(bench.b.daemon_url)
    baseline.prepare(url, variant, n, PARTITIONS)
    bench.b.settle(deadline, history=SETTLED, dirty=False)
    command = [
        sys.executable,
        str(BENCH_DIR / "baseline.py"),
        f"--url={bench.b.daemon_url}",
        f"--variant={variant}",
        f"--workers={workers}",
        f"--jobs={n}",
        f"--batch={batch}",
        "--no-fill",
        "--keep",
    ]
    cpu_before = _children_cpu()
    timeline: list[tuple[float, int]] = []
    started = time.perf_counter()
    proc = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=dies_with_us(signal.SIGTERM),
    )
    try:
        while True:
            left = bench.b.count(table="bench_baseline")
            timeline.append((time.perf_counter(), left))
            if left == 0:
                break
            if proc.poll() is not None:
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                raise RuntimeError(f"baseline program exited {proc.returncode}: {err[-400:]}")
            deadline.check(f"baseline program {variant} W={workers}")
            time.sleep(POLL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = _rates(timeline, started, n)
    out["client_cpu_us_per_job"] = (_children_cpu() - cpu_before) / n * 1e6
    return out


def baseline_drain(
    bench: Bench, variant: str, workers: int, opts: baseline.Options, deadline: Deadline
) -> dict[str, float]:
    """One raw-SQL drain, run as the daemon's user so the same counters apply."""
    n = bench.s.drain_jobs
    url = parse_database_url(bench.b.daemon_url)
    deadline.check(f"baseline {variant}")
    baseline.prepare(url, variant, n, PARTITIONS)
    bench.b.settle(deadline, history=SETTLED, dirty=False)
    before = bench.b.counters()
    cpu_before = _children_cpu()
    result = baseline.drain(
        url,
        variant,
        workers,
        n,
        opts,
        partitions=PARTITIONS,
        fill=False,
        timeout=max(5.0, deadline.remaining()),
    )
    out = {
        "rate": result.jobs_per_s,
        "client_statements": result.statements / n,
        "client_cpu_us_per_job": (_children_cpu() - cpu_before) / n * 1e6,
    }
    out.update(_per_job(before, bench.b.counters(), n))
    out.setdefault("deadlocks", float(result.deadlocks))
    return out


def baseline_series(
    bench: Bench, label: str, variant: str, workers: int, opts: baseline.Options, deadline: Deadline
) -> float:
    runs = [
        baseline_drain(bench, variant, workers, opts, deadline)
        for _ in range(bench.s.baseline_repeats)
    ]
    runs.sort(key=lambda r: r["rate"])
    mid = runs[len(runs) // 2]
    bench.fig(
        "drain",
        f"{label} W={workers}",
        mid["rate"],
        "jobs/s",
        note=f"median of {len(runs)}: {', '.join(_num(r['rate']) for r in runs)}; "
        + _cost_note(mid),
    )
    return mid["rate"]


def run(bench: Bench, deadline: Deadline) -> None:
    n = bench.s.drain_jobs
    mysql = isinstance(bench.b, MySQLBackend)
    default = baseline.Options()
    for workers in (2, 4):
        runs = [
            forkq_drain(bench, workers, deadline, f"drain-w{workers}-{i}")
            for i in range(bench.s.drain_repeats)
        ]
        best = _median_run(runs)
        bench.fig(
            "drain",
            f"forkq W={workers}, daemon start → last job gone",
            best["rate"],
            "jobs/s",
            target=None if mysql else (">=", 5000.0),
            note=f"median of {len(runs)}: {', '.join(_num(r['rate']) for r in runs)}; n={n:,}",
        )
        bench.fig(
            "drain",
            f"forkq W={workers}, steady state (95% → 5% left)",
            best["steady"],
            "jobs/s",
            note=f"boot to first ack {best['boot']:.2f}s; " + _cost_note(best),
        )
        variant = "skip_locked" if mysql else "sqlite"
        programs = [
            baseline_program(bench, variant, workers, deadline)
            for _ in range(bench.s.baseline_repeats)
        ]
        program = _median_run(programs)
        bench.fig(
            "drain",
            f"raw loop as a program W={workers}, launch → last row gone (baseline)",
            program["rate"],
            "jobs/s",
            note=f"median of {len(programs)}: {', '.join(_num(r['rate']) for r in programs)};"
            f" steady {_num(program['steady'])} jobs/s; first row gone after"
            f" {program['boot']:.2f}s; " + _cost_note(program),
        )
        target = (">=", 0.8) if mysql and workers == 4 else None
        bench.fig(
            "drain",
            f"forkq / raw program W={workers}, both from launch",
            best["rate"] / program["rate"],
            "x",
            target=target,
        )
        bench.fig(
            "drain",
            f"forkq / raw program W={workers}, both steady state",
            best["steady"] / program["steady"],
            "x",
        )
        if mysql:
            ref = baseline_series(
                bench,
                "raw SKIP LOCKED loop, clock from connected",
                "skip_locked",
                workers,
                default,
                deadline,
            )
            block = baseline_series(
                bench,
                f"raw seed-001 partition locks, K={PARTITIONS}",
                "block",
                workers,
                default,
                deadline,
            )
            fused = baseline_series(
                bench,
                "what-if: raw SKIP LOCKED, ack in next claim's tx",
                "skip_locked",
                workers,
                replace(default, fused=True),
                deadline,
            )
        else:
            ref = baseline_series(
                bench,
                "raw BEGIN IMMEDIATE/RETURNING loop, clock from connected",
                "sqlite",
                workers,
                default,
                deadline,
            )
            fused = baseline_series(
                bench,
                "what-if: raw loop, ack in next claim's tx",
                "sqlite",
                workers,
                replace(default, fused=True),
                deadline,
            )
        for kind in ("rate", "steady"):
            bench.fig(
                "drain",
                f"forkq / raw loop clocked from connected W={workers}"
                + (" (daemon start)" if kind == "rate" else " (steady state)"),
                best[kind] / ref,
                "x",
            )
        if mysql:
            bench.fig("drain", f"partition locks / SKIP LOCKED W={workers}", block / ref, "x")
        bench.fig("drain", f"what-if ack-in-claim / baseline W={workers}", fused / ref, "x")
    baseline.drop(parse_database_url(bench.b.daemon_url))
    bench.b.reset()


METHOD = [
    "- **drain**: N `bench.noop` jobs are enqueued, then `python -m supervisor run -c cfg` starts"
    " (one pool, W children, claim_batch 100, default max_jobs_per_child 1000, JSON logs to a file);"
    " the bench polls `COUNT(*)` every 10 ms. *Daemon start* = N / (last job gone - Popen); *steady"
    " state* = 90% of N / (time from 95% left to 5% left), which leaves out interpreter start,"
    " imports and forks. The daemon is stopped with SIGTERM afterwards (not timed); three runs,"
    " the median kept. *Raw loop as a program* (the baseline of the target ratio) runs"
    " `python benchmarks/baseline.py` on the same pre-filled rows and is timed exactly like the"
    " daemon: from Popen, by the same poller, median of three. The other raw baselines"
    " (benchmarks/baseline.py in-process) start their clock when every process is connected."
    " *Statements per job* come from MariaDB's USER_STATISTICS for the daemon's own user"
    " (SELECT + UPDATE + OTHER commands, BEGIN/COMMIT included; boot included).",
]
