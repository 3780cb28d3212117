"""What `[metrics]` costs a worker per job: a no-op drain with metrics off and on.

    .venv/bin/python benchmarks/metrics_overhead.py [--jobs 20000] [--rounds 5]
        [--database URL]

Each round drains `--jobs` no-op jobs with one in-process Worker (the loop a pool child
runs: claim in batches, run, acknowledge), once with metrics off and once on (the
worker's recording into a private multiprocess directory, as in a daemon with
`[metrics] listen`; no server, no scrape), each in a fresh process, the two alternating.
It prints the jobs/s and CPU time per job of every drain (logs go to a pipe, as a
daemon's do), the medians and their ratios, and the cost of one
`metrics.job_finished` call measured alone. SQLite in a temporary directory by default;
`--database` takes a MariaDB URL of a database of the bench's own (the schema is
applied, the queue `metrics_bench` drained). Runs alone; needs the test extras (prometheus-client).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from supervisor import handler  # noqa: E402
from supervisor.config import Config, build_config  # noqa: E402
from supervisor.observe import metrics  # noqa: E402
from supervisor.queue import Queue  # noqa: E402
from supervisor.store import open_store  # noqa: E402
from supervisor.work.worker import Worker  # noqa: E402

QUEUE = "metrics_bench"
HANDLER = "bench.metrics_noop"


@handler(HANDLER, queue=QUEUE)
def noop(payload: Any, job: Any) -> None:
    return None


def config_for(url: str, on: bool) -> Config:
    raw: dict[str, Any] = {
        "database": {"url": url},
        "supervisor": {"handlers": []},
        "pools": {QUEUE: {"workers": 1, "claim_batch": 100}},
    }
    if on:
        raw["metrics"] = {"listen": "127.0.0.1:9740"}  # never bound here: no server
    return build_config(raw, "metrics_overhead")


def drain(url: str, jobs: int, on: bool) -> tuple[float, float]:
    """(jobs/s, CPU microseconds per job) of one drain in this process."""
    config = config_for(url, on)
    metrics.boot(config)  # what the daemon does before any fork; a no-op while off
    store = open_store(config.database)
    store.apply_schema()  # what is missing; nothing on a database that has it
    queue = Queue(url)
    for start in range(0, jobs, 1000):
        queue.enqueue_many([{"handler": HANDLER} for _ in range(min(1000, jobs - start))])
    worker = Worker(store, config, [QUEUE], owner=f"bench:{on}:metrics")
    began, cpu = time.perf_counter(), time.process_time()
    done = 0
    while True:
        claimed = worker.work_once()
        if not claimed:
            break
        done += claimed
    worker.flush()
    took, cpu = time.perf_counter() - began, time.process_time() - cpu
    store.close()
    metrics.shutdown()
    assert done == jobs, (done, jobs)
    return jobs / took, cpu / jobs * 1e6


def call_cost() -> tuple[float, float]:
    """Microseconds per metrics.job_finished call, off and on."""
    calls = 200_000
    off = timeit.timeit(lambda: metrics.job_finished(QUEUE, HANDLER, "done", 0.001), number=calls)
    with tempfile.TemporaryDirectory() as directory:
        metrics.boot(config_for(f"sqlite:///{directory}/x.db", on=True))
        metrics.job_finished(QUEUE, HANDLER, "done", 0.001)  # the series, made once
        on = timeit.timeit(
            lambda: metrics.job_finished(QUEUE, HANDLER, "done", 0.001), number=calls
        )
        metrics.shutdown()
    return off / calls * 1e6, on / calls * 1e6


def one(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as directory:
        url = args.database or f"sqlite:///{directory}/bench.db"
        rate, cpu = drain(url, args.jobs, args.one == "on")
        print(json.dumps({"jobs_per_s": rate, "cpu_us_per_job": cpu}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database", default="")
    parser.add_argument("--one", choices=("off", "on"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args)
        return
    rates: dict[str, list[float]] = {"off": [], "on": []}
    cpus: dict[str, list[float]] = {"off": [], "on": []}
    for round_ in range(args.rounds):
        for variant in ("off", "on") if round_ % 2 == 0 else ("on", "off"):
            argv = [sys.executable, __file__, "--one", variant, "--jobs", str(args.jobs)]
            if args.database:
                argv += ["--database", args.database]
            done = subprocess.run(argv, check=True, capture_output=True, text=True)
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            rates[variant].append(figures["jobs_per_s"])
            cpus[variant].append(figures["cpu_us_per_job"])
            print(
                f"round {round_ + 1} metrics {variant:>3}: {figures['jobs_per_s']:8.0f} jobs/s,"
                f" {figures['cpu_us_per_job']:6.1f} us CPU per job",
                flush=True,
            )
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    print(f"median: off {off:.0f} jobs/s, on {on:.0f} jobs/s, on/off = {on / off:.3f}")
    off, on = statistics.median(cpus["off"]), statistics.median(cpus["on"])
    print(f"median CPU per job: off {off:.1f} us, on {on:.1f} us, on/off = {on / off:.3f}")
    off_us, on_us = call_cost()
    print(f"metrics.job_finished: {off_us:.3f} us per call off, {on_us:.2f} us on")


if __name__ == "__main__":
    main()
