"""Section tick: the check tick's database work (`stats`, `expired_leases`,
`paused_queues`, `count_ready`, `due_queues`) at 10k / 1M / 5M rows; `forkq status --json`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import scale_env
from scale_env import fresh_jobs

from supervisor import Queue
from supervisor.store import Store, open_store

from .scale_common import (
    Ctx,
    _k,
    _median,
    _owner,
    _stats_call,
)


def _tick_calls(store: Store, url: str, queues: list[str]) -> dict[str, Callable[[], Any]]:
    """The check tick's queries (and the idle poll), called as the daemon calls them."""
    poll = getattr(store, "poll", None) or store.due_queues
    return {
        "stats": _stats_call(store, url)[0],
        "expired_leases": store.expired_leases,
        "paused_queues": store.paused_queues,
        "count_ready": lambda: store.count_ready(queues[0], 1000),
        "due_queues": lambda: poll(queues),
    }


def _status_wall(url: str, runs: int, deadline: Any) -> tuple[float, list[float]]:
    """`python -m supervisor status --json --database URL`: wall seconds, median of runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKQ_")}
    env["PYTHONPATH"] = str(scale_env.REPO)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "supervisor", "status", "--json", "--database", url],
            cwd=scale_env.REPO,
            env=env,
            capture_output=True,
            timeout=max(10.0, deadline.remaining()),
            check=False,
        )
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(
                f"forkq status failed: {done.stderr.decode(errors='replace')[-300:]}"
            )
    return _median(times), times


def run(ctx: Ctx, deadline: Any) -> None:
    sz = ctx.sizes
    queues = [f"q{i}" for i in range(sz.tick_queues)]
    measured: dict[int, dict[str, float]] = {}
    status_wall: dict[int, tuple[float, list[float]]] = {}
    stats_how = "stats()"
    with fresh_jobs(ctx.backend, "tick", ctx.workdir) as jobs:
        ctx.describe_server(jobs)
        store = open_store(jobs.url)
        try:
            finished = scheduled = 0
            q = Queue(jobs.url)
            try:  # a few ready jobs in every queue, and some running under a live lease
                q.enqueue_many(
                    [{"handler": "t.noop", "queue": name} for name in queues for _ in range(25)]
                )
            finally:
                q.close()
            for name in queues:
                store.claim(name, _owner(), 5, 3600.0)
            base = 100
            for level in sz.tick_levels:
                want_scheduled = (level - base) // 5  # a fifth scheduled, the rest finished
                want_finished = level - base - want_scheduled
                started = time.perf_counter()
                if want_finished > finished:
                    jobs.fill("finished", finished + 1, want_finished, "q", sz.tick_queues)
                    finished = want_finished
                if want_scheduled > scheduled:
                    jobs.fill("scheduled", scheduled + 1, want_scheduled, "q", sz.tick_queues)
                    scheduled = want_scheduled
                ctx.note(
                    f"{_k(level)} rows ({finished:,} done/dead, {scheduled:,} scheduled, 100"
                    f" ready or running, {sz.tick_queues} queues) in"
                    f" {time.perf_counter() - started:.1f}s"
                )
                jobs.settle()
                deadline.check(f"filling {_k(level)} rows")
                calls = _tick_calls(store, jobs.url, queues)
                stats_how = _stats_call(store, jobs.url)[1]
                for call in calls.values():
                    call()  # warm: connection, plans
                times: dict[str, float] = {}
                for name, call in calls.items():
                    runs = []
                    for _ in range(sz.tick_repeats):
                        started = time.perf_counter()
                        call()
                        runs.append((time.perf_counter() - started) * 1000)
                    times[name] = _median(runs)
                    deadline.check(f"timing {name} at {_k(level)} rows")
                measured[level] = times
                if level in (sz.tick_levels[0], sz.tick_levels[-1]):
                    runs = 1 if level == sz.tick_levels[0] else sz.tick_repeats
                    status_wall[level] = _status_wall(jobs.url, runs, deadline)
        finally:
            store.close()
    _tick_figures(ctx, measured, status_wall, stats_how)


def _tick_figures(
    ctx: Ctx,
    measured: dict[int, dict[str, float]],
    status_wall: dict[int, tuple[float, list[float]]],
    stats_how: str,
) -> None:
    sz = ctx.sizes
    top = sz.tick_levels[-1]
    for level, times in measured.items():
        total = sum(times.values())
        ctx.fig(
            f"check-tick database time, {_k(level)} rows",
            total,
            "ms",
            target=("<=", 50.0) if level == top else None,
            note="; ".join(f"{k} {v:.2f}" for k, v in times.items())
            + f" (ms, median of {sz.tick_repeats})",
        )
    for level, times in measured.items():
        ctx.fig(f"store.stats(), {_k(level)} rows", times["stats"], "ms", note=stats_how)
    low = sz.tick_levels[0]
    if low in measured and top in measured:
        ctx.fig(
            f"check-tick database time ratio, {_k(top)} / {_k(low)} rows",
            sum(measured[top].values()) / max(1e-9, sum(measured[low].values())),
            "x",
        )
    for level, (median, runs) in status_wall.items():
        ctx.fig(
            f"forkq status --json wall time, {_k(level)} rows",
            median * 1000,
            "ms",
            note=f"interpreter start included; runs {', '.join(f'{r * 1000:.0f}' for r in runs)}",
        )


METHOD = [
    "- **tick**: 10k / 1M / 5M rows over 4 queues (4/5 done with one in ten dead, 1/5"
    " scheduled, 100 ready of which 20 running under a lease); each of `stats()`,"
    " `expired_leases()`, `paused_queues()`, `count_ready(q, 1000)` and `due_queues(queues)`"
    " (`poll` where it exists) timed, median of 3; the sum is the figure. `forkq status"
    " --json` is timed as a program (interpreter start included).",
]
