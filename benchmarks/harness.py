"""What every benchmark section is handed, and the tools they share.

- `Figure` / `Report`: one measured value with its target and verdict; the whole run's
  figures, query plans, notes and machine facts (printed as they come, then written to
  RESULTS.md by results.py).
- `Deadline`, `wait_for`, `SectionTimeout`: every wait in a section has a deadline.
- `Settings` (the sizes; `--quick` makes them small) and `Bench`: what a section gets,
  the backend under test (`bench.b`, backends.py), the report, the sizes and a work
  directory.
- `BenchDaemon`: `forkq run` as the bench configures it, on the tests' own launcher
  (tests/daemon_util.py's `Daemon`): one launcher for the tests and the benchmarks.
- The drain arithmetic: rates from a poll timeline, server-side cost per job.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for entry in (str(REPO), str(BENCH_DIR)):
    if entry not in sys.path:
        sys.path.insert(0, entry)
if str(REPO / "tests") not in sys.path:
    sys.path.append(str(REPO / "tests"))  # the tests' launchers: daemon_util, private_mariadb

import bench_handlers  # noqa: E402  (registers bench.* here too: enqueue finds their queue)
import daemon_util  # noqa: E402
import psutil  # noqa: E402

from supervisor import Queue  # noqa: E402
from supervisor.store import Store  # noqa: E402

if TYPE_CHECKING:
    from backends import Backend

DEFAULT_MYSQL_URL = "mysql://root@127.0.0.1:3306/forkq_bench"
# FORKQ_BENCH_USER: another name, so two runs on one server never drop each other's user.
BENCH_USER = os.environ.get("FORKQ_BENCH_USER", "forkq_bench")
QUEUE = bench_handlers.QUEUE
POLL = 0.01  # seconds between COUNT(*) polls while a drain runs
PARTITIONS = 8  # K of the seed-001 partition-lock baseline


# --- figures --------------------------------------------------------------------------------


@dataclass
class Figure:
    backend: str
    section: str
    name: str
    value: float | None
    unit: str
    target: tuple[str, float] | None = None  # ("<=", 50.0)
    note: str = ""
    error: str = ""

    @property
    def verdict(self) -> str:
        if self.error:
            return "ERROR"
        if self.target is None or self.value is None:
            return "info"
        op, bound = self.target
        ok = self.value <= bound if op == "<=" else self.value >= bound
        return "PASS" if ok else "MISS"

    def shown_value(self) -> str:
        if self.error:
            return self.error
        if self.value is None:
            return "n/a"
        return f"{_num(self.value)} {self.unit}".strip()

    def shown_target(self) -> str:
        if self.target is None:
            return "—"
        op, bound = self.target
        return f"{'≤' if op == '<=' else '≥'} {_num(bound)} {self.unit}".strip()


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    plans: dict[str, str] = field(default_factory=dict)  # title -> preformatted text
    notes: list[str] = field(default_factory=list)
    machine: dict[str, str] = field(default_factory=dict)

    def add(self, figure: Figure) -> Figure:
        self.figures.append(figure)
        line = (
            f"  {figure.backend:7} {figure.section:8} {figure.name:44} {figure.shown_value():>18}"
        )
        if figure.target is not None or figure.error:
            line += f"   target {figure.shown_target():>12}  {figure.verdict}"
        if figure.note:
            line += f"   ({figure.note})"
        print(line, flush=True)
        return figure


# --- deadlines ------------------------------------------------------------------------------


class SectionTimeout(Exception):
    pass


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def check(self, what: str) -> None:
        if self.remaining() <= 0:
            raise SectionTimeout(f"deadline passed while {what}")


def wait_for(
    predicate: Callable[[], Any], deadline: Deadline, what: str, interval: float = 0.05
) -> Any:
    while True:
        value = predicate()
        if value:
            return value
        deadline.check(f"waiting for {what}")
        time.sleep(interval)


# --- drain arithmetic ------------------------------------------------------------------------


def _per_job(
    before: dict[str, float] | None, after: dict[str, float] | None, n: int
) -> dict[str, float]:
    """Server-side cost of a drain from two counter snapshots."""
    if before is None or after is None:
        return {}
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    return {
        "statements_per_job": delta["statements"] / n,
        "rows_read_per_job": delta["rows_read"] / n,
        "busy_us_per_job": delta["busy"] / n * 1e6,
        "cpu_us_per_job": delta["cpu"] / n * 1e6,
        "deadlocks": delta.get("Innodb_deadlocks", 0.0),
        "lock_waits": delta.get("Innodb_row_lock_waits", 0.0),
    }


def _rates(timeline: list[tuple[float, int]], start: float, n: int) -> dict[str, float]:
    """Rates from a drain's (time, rows left) polls: from `start` to the last row gone, and
    the steady state from 95% to 5% left (no interpreter start, imports or forks)."""
    end = timeline[-1][0]
    t95 = next(t for t, c in timeline if c <= 0.95 * n)
    t05 = next(t for t, c in timeline if c <= 0.05 * n)
    first = next(t for t, c in timeline if c < n)
    return {
        "rate": n / (end - start),
        "steady": 0.9 * n / (t05 - t95) if t05 > t95 else float("nan"),
        "boot": first - start,
    }


def _median_run(runs: list[dict[str, float]], key: str = "rate") -> dict[str, float]:
    return sorted(runs, key=lambda r: r[key])[len(runs) // 2]


def _children_cpu() -> float:
    """CPU seconds (user + system) of every child process this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cost_note(run: dict[str, float]) -> str:
    cpu = (
        f"client CPU {run['client_cpu_us_per_job']:.0f} µs/job, "
        if "client_cpu_us_per_job" in run
        else ""
    )
    if "statements_per_job" not in run:
        if "client_statements" in run:
            return f"{cpu}{run['client_statements']:.2f} statements/job"
        return cpu.rstrip(", ")
    return cpu + (
        f"{run['statements_per_job']:.2f} statements/job, {run['rows_read_per_job']:.1f} rows read/job,"
        f" server busy {run['busy_us_per_job']:.0f} µs/job, {run['deadlocks']:.0f} deadlocks,"
        f" {run['lock_waits']:.0f} row-lock waits"
    )


# --- the daemon -----------------------------------------------------------------------------


class BenchDaemon(daemon_util.Daemon):
    """`forkq run` as the bench runs it, on the tests' launcher: one pool `bench` of W
    children with the bench's handlers (benchmarks/ on PYTHONPATH), the database URL from
    FORKQ_DATABASE_URL (no password in the file), JSON logs to `{tag}.log` in `workdir`,
    `bench.stamp` writing to `{tag}.stamps`. In a `with` block it is stopped gracefully
    at the end, or every process of its session killed if the block raised."""

    def __init__(self, workdir: Path, url: str, workers: int, tag: str, **pool: Any) -> None:
        self.workers = workers
        self.pool_settings = pool
        self.stamp_file = workdir / f"{tag}.stamps"
        self.started = 0.0  # perf_counter just before the launch: drains are timed from it
        pythonpath = os.pathsep.join([str(BENCH_DIR), str(REPO), os.environ.get("PYTHONPATH", "")])
        super().__init__(
            workdir,
            url,
            pools={QUEUE: {"workers": workers, "max_workers": workers, "timeout": 60, **pool}},
            env={
                "FORKQ_DATABASE_URL": url,
                "PYTHONPATH": pythonpath.rstrip(os.pathsep),
                bench_handlers.STAMP_FILE_ENV: str(self.stamp_file),
            },
            name=tag,
        )

    def write_config(
        self,
        pools: dict[str, dict[str, Any]] | None = None,
        supervisor: dict[str, Any] | None = None,
        text: str | None = None,
    ) -> None:
        """The bench's config, whatever the tests' defaults are: the URL comes from
        FORKQ_DATABASE_URL, so the file holds no password."""
        if text is None:
            lines = [
                "[supervisor]",
                'handlers = ["bench_handlers"]',
                "check_interval = 10",
                "shutdown_timeout = 10",
                f"[pools.{QUEUE}]",
                f"workers = {self.workers}",
                f"max_workers = {self.workers}",
                "timeout = 60",
            ] + [f"{key} = {value}" for key, value in self.pool_settings.items()]
            text = "\n".join(lines) + "\n"
        super().write_config(pools, supervisor, text)

    def start(self) -> BenchDaemon:
        self.started = time.perf_counter()
        super().start()
        return self

    def master(self) -> psutil.Process:
        return psutil.Process(self.pid)

    def pool_workers(self) -> list[psutil.Process]:
        """The pool's children (not a check-tick process the master forks now and then)."""
        found = []
        for kid in self.children():
            with contextlib.suppress(psutil.Error):
                if " worker " in daemon_util.title_of(kid):
                    found.append(kid)
        return found

    def all_idle(self) -> bool:
        """Every child is up and reports idle (its process title)."""
        self.check_alive()
        titles = []
        for kid in self.pool_workers():
            try:
                titles.append(daemon_util.title_of(kid))
            except psutil.Error:
                return False
        return len(titles) == self.workers and all("idle" in t for t in titles)

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {self.proc.returncode}: {self.tail()}")

    def tail(self, lines: int = 8) -> str:
        text = self.stderr_text().splitlines() + self.log_text().splitlines()
        return " | ".join(text[-lines:])

    def __enter__(self) -> BenchDaemon:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None and self.alive():
            try:
                self.stop(timeout=20.0)  # SIGTERM (graceful); SIGKILL everything left past it
                return
            except AssertionError:
                pass
        self.kill_all()


# --- what a section is handed ----------------------------------------------------------------


@dataclass
class Settings:
    enqueue_single: int = 4000
    enqueue_many: int = 50_000
    many_batch: int = 1000
    drain_jobs: int = 5000
    mixed_jobs: int = 5000  # the mixed section's heavy tail
    drain_repeats: int = 3  # forkq drains per W (median kept, like the baselines)
    baseline_repeats: int = 3  # baseline drains per variant and W (median kept)
    latency_jobs: int = 200
    latency_gap: float = 0.020
    idle_window: float = 31.0  # > IDLE_RECHECK (30 s): includes every child's own re-check
    idle_children: tuple[int, ...] = (2, 16)
    memory_jobs: int = 10_000
    scale_small: int = 10_000
    scale_large: int = 1_000_000
    scale_ready: int = 1000
    scale_batches: int = 200
    scale_backlog: int = 50_000
    scale_backlog_batches: int = 20
    is_quick: bool = False  # the scale+ sections read it for their own small sizes

    @classmethod
    def quick(cls) -> Settings:
        return cls(
            is_quick=True,
            enqueue_single=300,
            enqueue_many=5000,
            drain_jobs=1000,
            mixed_jobs=1000,
            drain_repeats=1,
            baseline_repeats=1,
            latency_jobs=50,
            idle_window=5.0,
            memory_jobs=2000,
            scale_large=100_000,
            scale_batches=50,
            scale_backlog=10_000,
        )


class Bench:
    """What a section is handed: the backend under test (`b`), the report, the sizes (`s`)
    and a work directory; `fig` adds a figure, `plan` a query plan."""

    def __init__(self, backend: Backend, report: Report, settings: Settings, workdir: Path) -> None:
        self.b = backend
        self.report = report
        self.s = settings
        self.workdir = workdir
        self.daemon_command: list[str] | None = None  # the lab's wrapper instead of -m supervisor
        self.daemon_env: dict[str, str] = {}
        self.pool: dict[str, Any] = {}  # extra [pools.bench] keys for drains

    def fig(self, section: str, name: str, value: float | None, unit: str, **kw: Any) -> Figure:
        return self.report.add(Figure(self.b.name, section, name, value, unit, **kw))

    def enqueue_jobs(self, n: int, handler: str = "bench.noop") -> None:
        q = Queue(self.b.admin_url)
        try:
            for start in range(0, n, 1000):
                q.enqueue_many(
                    [
                        {"handler": handler, "payload": {"i": i}}
                        for i in range(start, min(n, start + 1000))
                    ]
                )
        finally:
            q.close()

    def plan(
        self, backend: Backend, store: Store, title: str, query: str, params: dict[str, Any]
    ) -> None:
        params = {**params, "now": time.time()}  # SQLite binds the clock: never a stale one
        self.report.plans[f"{backend.name}: {title}"] = backend.explain(store, query, params)
