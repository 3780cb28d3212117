"""What the scale+ sections share (SPEC "Scale and latency"; issue 11): their sizes (small
with `--quick`), `Ctx` (what they need of the run's Bench), and the helpers several use.

Five sections, each a module here, run by benchmarks/run.py like the others
(`--sections claims,tick,...`, or `--sections scale+` for these and the `scale` section);
each figure goes into the same table with its target and PASS / MISS:

- claims   rows read and rows locked per claim with 0 / 100k / 1M scheduled jobs (run_at
           a day ahead) in the claiming queue, and the claim's time; whether an enqueue
           waits while a claim transaction is open (SQLite: claim time only).
- tick     the check tick's database work (`stats`, `expired_leases`, `paused_queues`,
           `count_ready`, `due_queues`) at 10k / 1M / 5M rows; `forkq status --json`.
- wake     enqueue → handler start on an idle daemon, from this host (the producer's
           nudge, when the code has one) and as from another host (nudge off: the poll).
- silent   the master's reaction while the database does not answer (MariaDB: the
           private server SIGSTOPped; SQLite: another connection holds the write lock):
           SIGTERM → master gone, and an overtime kill's lateness.
- trickle  issue 11's "Done when": 1M scheduled jobs, then a trickle of due jobs drained
           by `forkq run`; the server must live, rows read per job within 1.5x of the
           same trickle with nothing scheduled, and no enqueue waiting on a lock.

MariaDB figures come from a private mariadbd (benchmarks/scale_env.py) with the default
128 MiB buffer pool, never from the shared server. Every section is bounded by its
deadline; a stopped server is continued and every daemon killed in `finally` blocks.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import socket
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from scale_env import Jobs

from supervisor.store import Store

BUDGET = 780.0  # what these sections add to run.py's total budget (both backends)
QUEUE = "s"


@dataclass
class Sizes:
    claim_levels: tuple[int, ...] = (0, 100_000, 1_000_000)
    claim_due: int = 5  # due jobs waiting at each claim (the trickle)
    claim_probes: int = 5  # claims with the transaction held open and looked at
    claim_timed: int = 20  # claims timed (median)
    tick_levels: tuple[int, ...] = (10_000, 1_000_000, 5_000_000)
    tick_queues: int = 4
    tick_repeats: int = 3
    wake_jobs: int = 200
    wake_gap: float = 0.020
    silent_runs: int = 3
    trickle_scheduled: int = 1_000_000
    trickle_jobs: int = 200
    trickle_rate: float = 20.0  # jobs per second

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            claim_levels=(0, 10_000, 100_000),
            claim_probes=2,
            claim_timed=5,
            tick_levels=(10_000, 100_000, 500_000),
            tick_repeats=1,
            wake_jobs=50,
            silent_runs=1,
            trickle_scheduled=100_000,
            trickle_jobs=60,
        )


class Ctx:
    """What a section needs from run.py's Bench: the backend's name, figures, notes."""

    def __init__(self, bench: Any, section: str) -> None:
        self.bench = bench
        self.section = section
        self.backend: str = bench.b.name
        self.workdir: Path = bench.workdir
        self.sizes = Sizes.quick() if getattr(bench.s, "is_quick", False) else Sizes()

    def fig(self, name: str, value: float | None, unit: str, **kw: Any) -> Any:
        return self.bench.fig(self.section, name, value, unit, **kw)

    def error(self, name: str, message: str) -> None:
        self.fig(name, None, "", error=message[:300])

    def note(self, text: str) -> None:
        self.bench.report.notes.append(f"{self.backend} {self.section}: {text}")

    def describe_server(self, jobs: Jobs) -> None:
        if jobs.srv is not None:
            key = "private MariaDB (claims, tick, wake, silent, trickle)"
            if key not in self.bench.report.machine:
                self.bench.report.machine[key] = jobs.srv.describe()


@contextlib.contextmanager
def wake_dir(ctx: Ctx) -> Iterator[dict[str, str]]:
    """A runtime directory of our own for the same-host nudge (supervisor/wake.py), so
    no daemon of anyone else on this machine hears our producers; restored afterwards."""
    path = ctx.workdir / "run"
    path.mkdir(exist_ok=True)
    was = os.environ.get("FORKQ_RUNTIME_DIR")
    os.environ["FORKQ_RUNTIME_DIR"] = str(path)
    try:
        yield {"FORKQ_RUNTIME_DIR": str(path)}
    finally:
        if was is None:
            os.environ.pop("FORKQ_RUNTIME_DIR", None)
        else:
            os.environ["FORKQ_RUNTIME_DIR"] = was


def _lookup(modules: tuple[str, ...], name: str) -> Any:
    """`name` from the first of `modules` that has it (the package layout moves), or None."""
    for module in modules:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _pct(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def _k(n: int) -> str:
    """1000000 -> 1M, 100000 -> 100k."""
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return f"{n:,}"


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:scale"


# --- 1. claims with scheduled jobs ----------------------------------------------------------


def _handler_reads(conn: Any) -> dict[str, int]:
    """The session's Handler_read_* and Handler_icp_* counters (see `_reads_total`)."""
    with conn.cursor() as cur:
        cur.execute(
            "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler_read%'"
            " OR Variable_name LIKE 'Handler_icp%'"
        )
        return {name: int(value) for name, value in cur.fetchall()}


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def _reads_total(reads: dict[str, int]) -> int:
    """Rows (index entries) the storage engine read: Handler_read_* counts only what index
    condition pushdown let through to the server; what InnoDB read and filtered itself is
    Handler_icp_attempts - Handler_icp_match (the claim's `run_at <= NOW()` is pushed down,
    so without it a claim that walks 100k scheduled rows shows 6 rows read)."""
    handed = sum(v for k, v in reads.items() if k.startswith("Handler_read"))
    filtered = reads.get("Handler_icp_attempts", 0) - reads.get("Handler_icp_match", 0)
    return handed + filtered


# --- 2. the check tick's database work ------------------------------------------------------


def _stats_call(store: Store, url: str) -> tuple[Callable[[], Any], str]:
    """`store.stats` as the check tick calls it: with the tick's cap where the code has
    one (`stats(cap=stats_cap(config.alerts))`, default alert rules), else plain."""
    if "cap" not in inspect.signature(store.stats).parameters:
        return store.stats, "stats()"
    stats_cap = _lookup(("supervisor.cluster.alerts.rules", "supervisor.alerts"), "stats_cap")
    try:
        from supervisor.config import load_config

        cap = stats_cap(load_config(None, url).alerts)
    except (ImportError, AttributeError, TypeError):
        return store.stats, "stats() with its default cap"
    return partial(store.stats, cap=cap), f"stats(cap={cap:,}), as the tick calls it"


METHOD = [
    "- **claims / tick / wake / silent / trickle** (benchmarks/sections/): MariaDB figures come"
    " from a private `mariadbd` the bench starts on its own port and data directory (the"
    " tests' tests/private_mariadb.py launcher) with MariaDB's defaults: innodb_buffer_pool_size"
    " 128 MiB, innodb_log_file_size 96 MiB; innodb_lock_wait_timeout 2 s so a blocked INSERT"
    " fails in bounded time. Rows are arranged with INSERT ... SELECT over the SEQUENCE engine"
    " (SQLite: a recursive CTE); scheduled rows have run_at a day ahead and the status"
    " forkq's own `enqueue(delay=86400)` writes (probed). Daemons are `forkq run` started by"
    " the tests' launcher (tests/daemon_util.py) with production timers (poll 50 ms,"
    " heartbeat 5 s, check tick 10 s).",
]

REPRODUCE = [
    "```sh",
    ".venv/bin/python benchmarks/run.py --sections scale+ --no-write    # every scale figure",
    ".venv/bin/python benchmarks/run.py --backends mariadb --sections trickle --no-write",
    ".venv/bin/python benchmarks/run.py --sections claims,tick --quick --no-write",
    "```",
]
