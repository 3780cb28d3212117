"""Section databases (MariaDB only): N jobs drained through one database against the
same N spread over two databases, two private servers (issue 24, "several databases").

Both layouts in the same run, on two private `mariadbd`s started by the section
(tests/private_databases.py): one `forkq run` with two pools of W/2 children each,
queues "d1" and "d2". One database: both queues on server 1. Two databases: "d2" in
`[databases.reports]` on server 2, enqueued through `Queue.from_config`. Each round
times, in turns, a drain of N jobs (half per queue) from the enqueue to the last row
gone from every server; the ratio is two ÷ one, the median of the rounds'.

Two kinds of job: no-op (`t.noop`: the database's and forkq's own cost per job) and a
mix (`t.sleep`, fixed seed: 94% ~1 ms, 5% 50 ms, 1% 500 ms). On one 2-core machine both
servers and every worker share the same cores and disk, so no speed-up is expected: a
second database pays off on separate hardware, where each primary has its own. Scaling
up instead: one more no-op drain through one database per round with server 1's
`innodb_flush_log_at_trx_commit` at 2 (an fsync a second instead of one a commit).

    .venv/bin/python benchmarks/run.py --backends mariadb --sections databases --no-write
"""

from __future__ import annotations

import contextlib
import random
import signal
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from private_databases import TwoDatabases, databases_config, remaining, wait_idle
from scale_env import daemon

from supervisor import Queue
from supervisor.routing import Router

QUEUES = ("d1", "d2")
WORKERS = 4  # in all: W/2 per queue, in both layouts
RUNS = 3
JOBS = 3000
KINDS = ("no-op", "mixed")
MIX = [(0.94, 0.001), (0.05, 0.050), (0.01, 0.5)]  # (share, seconds) of the mixed drain
POOLS = {q: {"workers": WORKERS // 2, "max_workers": WORKERS // 2, "timeout": 60} for q in QUEUES}


def jobs(kind: str) -> list[dict[str, Any]]:
    """N jobs, half per queue, alternating; the mix shuffled with a fixed seed."""
    if kind == "no-op":
        made = [{"handler": "t.noop", "payload": {}} for _ in range(JOBS)]
    else:
        rng = random.Random(24)
        seconds = [s for share, s in MIX for _ in range(round(share * JOBS))]
        rng.shuffle(seconds)
        made = [{"handler": "t.sleep", "payload": {"seconds": s}} for s in seconds]
    return [{**job, "queue": QUEUES[n % 2]} for n, job in enumerate(made)]


def drain(
    made: Any, producer: Queue | Router, pair: TwoDatabases, batch: list[Any], deadline: Any
) -> float:
    """Seconds from the enqueue of `batch` to the last row gone from both servers."""
    started = time.monotonic()
    for start in range(0, len(batch), 1000):
        producer.enqueue_many(batch[start : start + 1000])
    while remaining(pair.home) or remaining(pair.reports):
        if not made.alive():
            raise RuntimeError(f"{made.name} exited: {why_stopped(made)}")
        deadline.check("waiting for the drain")
        time.sleep(0.02)
    return time.monotonic() - started


def why_stopped(made: Any) -> str:
    """The exit status, what stopped the supervisor (a signal, an error), stderr's tail."""
    said = [e for e in made.events() if e.get("component") == "supervisor"]
    stops = [e for e in said if e.get("event") in ("supervisor_stopping", "supervisor_stopped")]
    return f"rc {made.proc.poll()}, {stops[-2:]}, stderr: {made.stderr_text()[-300:]!r}"


@contextlib.contextmanager
def serving(made: Any) -> Iterator[None]:
    """scale_env.running's life, ready when every worker is idle: with two databases
    they are grandchildren of `forkq run` (a master per database)."""
    try:
        wait_idle(made.start())
        yield
    finally:
        if made.alive():
            with contextlib.suppress(Exception):
                made.send_signal(signal.SIGTERM)
                made.proc.wait(timeout=10)
        made.kill_all()


def run(bench: Any, deadline: Any) -> None:
    if bench.b.name != "mariadb":
        return
    pair = TwoDatabases()
    try:
        pair.start()
        _drains(bench, pair, deadline)
    finally:
        pair.destroy()


def _layouts(workdir: Path, pair: TwoDatabases) -> list[tuple[str, Any, Queue | Router]]:
    """(label, daemon, producer) of each layout: one database, then two."""
    one = daemon(workdir, pair.home.url, "databases-one", POOLS)
    two = daemon(workdir, pair.home.url, "databases-two", POOLS)
    two.write_config(
        text=databases_config(
            pair.home.url, {"reports": (pair.reports.url, QUEUES[1:])}, POOLS, two.supervisor
        )
    )
    return [
        ("one", one, Queue(pair.home.url, wake=False)),
        ("two", two, Queue.from_config(two.config_path, wake=False)),
    ]


def flush_log_at_commit(pair: TwoDatabases, value: int) -> None:
    """innodb_flush_log_at_trx_commit on server 1 (dynamic: no restart)."""
    pair.home.admin("SET GLOBAL innodb_flush_log_at_trx_commit = %s", (value,))


def _drains(bench: Any, pair: TwoDatabases, deadline: Any) -> None:
    layouts = _layouts(bench.workdir, pair)
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(RUNS):
            for label, made, producer in layouts:
                with serving(made):
                    drain(made, producer, pair, jobs("no-op"), deadline)  # warm: connections
                    for kind in KINDS:
                        seconds = drain(made, producer, pair, jobs(kind), deadline)
                        rates.setdefault((kind, label), []).append(JOBS / seconds)
                    if label == "one":  # scaling up: one fsync a second instead of one a commit
                        flush_log_at_commit(pair, 2)
                        try:
                            seconds = drain(made, producer, pair, jobs("no-op"), deadline)
                        finally:
                            flush_log_at_commit(pair, 1)
                        rates.setdefault(("no-op", "flush2"), []).append(JOBS / seconds)
    finally:
        for _, _, producer in layouts:
            producer.close()
    _figures(bench, rates)


def _figures(bench: Any, rates: dict[tuple[str, str], list[float]]) -> None:
    for kind in KINDS:
        one, two = rates[(kind, "one")], rates[(kind, "two")]
        note = f"N={JOBS} {kind}, W={WORKERS} (2 pools of {WORKERS // 2}), {RUNS} rounds, median"
        bench.fig("databases", f"{kind} drain, one database", statistics.median(one), "jobs/s",
                  note=note)  # fmt: skip
        bench.fig("databases", f"{kind} drain, two databases", statistics.median(two),
                  "jobs/s", note=note)  # fmt: skip
        ratios = [b / a for a, b in zip(one, two, strict=True)]
        bench.fig("databases", f"{kind} drain, two ÷ one", statistics.median(ratios), "x",
                  note=f"rounds: {rounds(ratios)}; one machine: no speed-up expected")  # fmt: skip
    flush2 = rates[("no-op", "flush2")]
    ratios = [b / a for a, b in zip(rates[("no-op", "one")], flush2, strict=True)]
    bench.fig("databases", "no-op drain, one database, flush_log_at_trx_commit=2 ÷ 1",
              statistics.median(ratios), "x", note=f"rounds: {rounds(ratios)}")  # fmt: skip


def rounds(ratios: list[float]) -> str:
    return ", ".join(f"{r:.2f}" for r in ratios)


METHOD = [
    "- **databases** (MariaDB only): two private `mariadbd`s on this machine"
    " (tests/private_databases.py). One `forkq run` with two pools of 2 (queues d1, d2);"
    " one database: both queues on server 1; two databases: d2 in `[databases.reports]`"
    " on server 2, enqueued through `Queue.from_config`. 3 rounds in turns, each a drain of"
    " 3,000 jobs (half per queue) from the enqueue to the last row gone from both servers:"
    " no-op (after a warm-up drain) and a mix (`t.sleep`, 94% 1 ms, 5% 50 ms, 1% 500 ms,"
    " fixed seed). The ratio is two ÷ one, the median of the rounds'. Scaling up: in each"
    " round one more no-op drain through one database with server 1's"
    " innodb_flush_log_at_trx_commit set to 2 (SET GLOBAL), against the no-op drain at 1.",
]
