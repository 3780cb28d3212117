"""Section commands: the per-job overhead of a command handler (issue 16).

One `forkq run` (the tests' launcher) with one pool of ONE child works off no-op jobs
two ways, alternating: the no-op Python handler (`t.noop`) and `true` as a
`[commands."bench.true"]` program (a fork and exec, three pipes, a pidfd and a wait per
job). Each drain is timed from the enqueue to the last row gone; the figure per kind is
the median of RUNS drains, and the overhead per job is the difference of the medians'
per-job times.

    .venv/bin/python benchmarks/run.py --backends sqlite,mariadb --sections commands --no-write
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from scale_env import daemon, running

from supervisor import Queue

QUEUE = "cmd"
RUNS = 3  # drains per kind (median kept)
POLL = 0.01  # seconds between counts while a drain runs
KINDS = {"python": "t.noop", "command": "bench.true"}
COMMANDS = f"""
[commands."bench.true"]
argv = ["true"]
queue = "{QUEUE}"
"""


def run(bench: Any, deadline: Any) -> None:
    jobs = 300 if getattr(bench.s, "is_quick", False) else 1500
    made = daemon(
        bench.workdir,
        bench.b.daemon_url,
        "commands",
        {QUEUE: {"workers": 1, "max_workers": 1, "timeout": 60, "on_success": "delete"}},
        supervisor={"check_interval": 10, "poll_interval": 0.05},
    )
    made.write_config(text=made.config_path.read_text(encoding="utf-8") + COMMANDS)
    rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
    queue = Queue(bench.b.admin_url)
    try:
        with running(made):
            drain(bench, queue, "t.noop", 50, deadline)  # warm: connections, page cache
            drain(bench, queue, "bench.true", 50, deadline)
            for _ in range(RUNS):
                for kind, handler in KINDS.items():
                    rates[kind].append(drain(bench, queue, handler, jobs, deadline))
    finally:
        queue.close()
    python, command = (statistics.median(rates[kind]) for kind in KINDS)
    note = f"1 child, {jobs:,} jobs a drain, median of {RUNS}"
    bench.fig("commands", "no-op Python handler", python, "jobs/s", note=note)
    bench.fig("commands", "`true` as a [commands] handler", command, "jobs/s", note=note)
    overhead = (1 / command - 1 / python) * 1000
    bench.fig("commands", "command handler overhead per job", overhead, "ms", note=note)


def drain(bench: Any, queue: Queue, handler: str, jobs: int, deadline: Any) -> float:
    """Enqueue `jobs` jobs of `handler` at once; jobs per second until the last is gone."""
    started = time.perf_counter()
    for first in range(0, jobs, 1000):
        queue.enqueue_many(
            [
                {"handler": handler, "payload": {"i": i}, "queue": QUEUE}
                for i in range(first, min(jobs, first + 1000))
            ]
        )
    while bench.b.count() > 0:
        deadline.check(f"draining {jobs} {handler} jobs")
        time.sleep(POLL)
    return jobs / (time.perf_counter() - started)


METHOD: list[str] = []  # the figures' notes say how they are measured
