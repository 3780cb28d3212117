"""Scale and latency sections of `make bench` (SPEC "Scale and latency"; issue 11).

Five sections, run by benchmarks/run.py like its own (`--sections claims,tick,...`, or
`--sections scale+` for these and run.py's `scale`); each figure goes into the same
table with its target and PASS / MISS:

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
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import pymysql
import scale_env
from scale_env import Jobs, ServerDied, daemon, fresh_jobs, read_records, running

from supervisor import Queue
from supervisor.queue import build_job
from supervisor.store import Store, open_store

SECTIONS: dict[str, float] = {  # name -> hard deadline in seconds (run.py's SECTIONS)
    "claims": 240.0,
    "tick": 330.0,
    "wake": 60.0,
    "silent": 200.0,
    "trickle": 200.0,
}
GROUPS = {"scale+": ["scale", *SECTIONS]}  # --sections aliases
BUDGET = 780.0  # what these sections add to run.py's total budget (both backends)
QUEUE = "s"
READ_LIMIT = 20  # the claim batch (claim_batch's default)


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


def runner(bench: Any, name: str) -> Callable[[Any], None] | None:
    """The section `name` of this module as run.py calls a section, or None."""
    if name not in SECTIONS:
        return None
    return partial(RUNNERS[name], Ctx(bench, name))


def close() -> None:
    """The end of a backend's run: the private server goes."""
    scale_env.close_server()


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


def _enqueue_due(url: str, n: int, queue: str = QUEUE) -> None:
    q = Queue(url)
    try:
        q.enqueue_many([{"handler": "t.noop", "payload": {}, "queue": queue}] * n)
    finally:
        q.close()


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


class ClaimProbe:
    """One claim through forkq's own code path, its transaction held open at its commit.

    `store.claim` runs as shipped; two hooks on this store's objects look in: around the
    `claim_select` named query (the session's Handler_read_* counters: rows read by the
    SELECT alone), and just before the transaction's COMMIT, where a second connection
    reads the claim's INNODB_TRX row (rows locked, lock structs, lock memory) and two
    producers try an INSERT into the same queue while the claim still holds its locks:
    forkq's enqueue of a delayed job, and an application's raw INSERT of a job due now
    (REPEATABLE READ, the server's default), each with a 1 s lock wait timeout.
    """

    def __init__(self, jobs: Jobs) -> None:
        assert jobs.srv is not None
        srv = jobs.srv
        self.watch = srv.admin_connection()
        self.app = pymysql.connect(
            host="127.0.0.1",
            port=srv.port,
            user=scale_env.USER,
            password=scale_env.PASSWORD,
            database=jobs.name,  # type: ignore[attr-defined]
            autocommit=True,
            connect_timeout=5,
            read_timeout=30,
        )
        with self.app.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
        self.producer = open_store(jobs.url)
        self.producer.db_now()  # connects
        with self.producer._connection().cursor() as cur:  # type: ignore[attr-defined]
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
        self.delayed = build_job(
            "t.noop", {}, QUEUE, scale_env.SCHEDULED_DELAY, None, 0, None, None
        )

    def close(self) -> None:
        for closer in (self.watch.close, self.app.close, self.producer.close):
            with contextlib.suppress(Exception):
                closer()

    def run(self, store: Store, owner: str) -> dict[str, Any]:
        conn = store._connection()  # type: ignore[attr-defined]
        thread = conn.thread_id()
        seen: dict[str, Any] = {}
        fetchall = store._fetchall
        commit = conn.commit

        def hooked_fetchall(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
            if name != "claim_select":
                return fetchall(name, params)
            before = _handler_reads(conn)
            started = time.perf_counter()
            rows = fetchall(name, params)
            seen["select_ms"] = (time.perf_counter() - started) * 1000
            seen["select"] = _delta(before, _handler_reads(conn))
            return rows

        def hooked_commit() -> None:
            if "locks" not in seen:
                seen["tx"] = _delta(start, _handler_reads(conn))
                seen["locks"] = self._locks(thread)
                seen["inserts"] = self._inserts()
            commit()

        store._fetchall = hooked_fetchall  # type: ignore[method-assign]
        conn.commit = hooked_commit
        try:
            start = _handler_reads(conn)
            rows = store.claim(QUEUE, owner, READ_LIMIT, 60.0)
        finally:
            del store._fetchall
            with contextlib.suppress(AttributeError):
                del conn.commit
        seen["claimed"] = [r.id for r in rows]
        return seen

    def _locks(self, thread: int) -> dict[str, Any]:
        with self.watch.cursor() as cur:
            cur.execute(
                "SELECT trx_rows_locked, trx_lock_structs, trx_lock_memory_bytes,"
                " trx_rows_modified, trx_isolation_level FROM information_schema.INNODB_TRX"
                " WHERE trx_mysql_thread_id = %s",
                (thread,),
            )
            row = cur.fetchone()
        if row is None:
            return {}
        keys = ("rows_locked", "lock_structs", "lock_memory", "rows_modified", "isolation")
        return dict(zip(keys, row, strict=True))

    def _inserts(self) -> dict[str, float]:
        """Milliseconds each producer's INSERT took (>= 1000: it waited out the timeout)."""
        out: dict[str, float] = {}
        started = time.perf_counter()
        try:
            params = self.producer._params(**Store.job_params(self.delayed))
            self.producer._insert_job(params)
        except Exception:
            out["timeouts"] = out.get("timeouts", 0) + 1
        out["forkq_delayed_ms"] = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        try:
            with self.app.cursor() as cur:
                cur.execute(
                    "INSERT INTO forkq_jobs (queue, handler, payload) VALUES (%s, 't.noop', '{}')",
                    (QUEUE,),
                )
        except pymysql.err.OperationalError:
            out["timeouts"] = out.get("timeouts", 0) + 1
        out["raw_due_ms"] = (time.perf_counter() - started) * 1000
        return out


def _reads_total(reads: dict[str, int]) -> int:
    """Rows (index entries) the storage engine read: Handler_read_* counts only what index
    condition pushdown let through to the server; what InnoDB read and filtered itself is
    Handler_icp_attempts - Handler_icp_match (the claim's `run_at <= NOW()` is pushed down,
    so without it a claim that walks 100k scheduled rows shows 6 rows read)."""
    handed = sum(v for k, v in reads.items() if k.startswith("Handler_read"))
    filtered = reads.get("Handler_icp_attempts", 0) - reads.get("Handler_icp_match", 0)
    return handed + filtered


def _reads_note(reads: dict[str, int]) -> str:
    return ", ".join(
        f"{k.replace('Handler_read_', '').replace('Handler_', '')} {v:,}"
        for k, v in sorted(reads.items())
    )


def _timed_claims(
    jobs: Jobs, store: Store, owner: str, n: int, due: int, deadline: Any
) -> list[float]:
    """Milliseconds of `store.claim(queue, owner, 20, 60)`, `claim_due` due jobs waiting
    each time (refilled, and the claimed ones completed, outside the clock)."""
    times = []
    for _ in range(n):
        _enqueue_due(jobs.url, due)
        started = time.perf_counter()
        rows = store.claim(QUEUE, owner, READ_LIMIT, 60.0)
        times.append((time.perf_counter() - started) * 1000)
        if not rows:
            raise RuntimeError("the claim found none of the due jobs")
        store.complete(owner, [r.id for r in rows], "delete")
        deadline.check("timing claims")
    return times


def _claim_level(
    ctx: Ctx, jobs: Jobs, store: Store, probe: ClaimProbe | None, deadline: Any
) -> dict[str, Any]:
    sz = ctx.sizes
    owner = _owner()
    out: dict[str, Any] = {"probes": []}
    if probe is not None:
        for _ in range(sz.claim_probes):
            _enqueue_due(jobs.url, sz.claim_due)
            seen = probe.run(store, owner)
            store.complete(owner, seen["claimed"], "delete")
            out["probes"].append(seen)
            deadline.check("probing claims")
    out["times"] = _timed_claims(jobs, store, owner, sz.claim_timed, sz.claim_due, deadline)
    return out


def claims(ctx: Ctx, deadline: Any) -> None:
    sz = ctx.sizes
    mysql = ctx.backend == "mariadb"
    results: dict[int, dict[str, Any]] = {}
    failed: tuple[int, str] | None = None
    with fresh_jobs(ctx.backend, "claims", ctx.workdir) as jobs:
        ctx.describe_server(jobs)
        status = jobs.scheduled_status()
        store = open_store(jobs.url)
        probe = ClaimProbe(jobs) if mysql else None
        have = 0
        level = 0
        try:
            _enqueue_due(jobs.url, 1)
            store.claim(QUEUE, _owner(), READ_LIMIT, 60.0)  # connect; warm the plan
            for level in sz.claim_levels:
                if level > have:
                    started = time.perf_counter()
                    jobs.fill("scheduled", have + 1, level)
                    ctx.note(
                        f"{_k(level)} scheduled rows (status '{status}', as enqueue(delay=86400)"
                        f" writes them) in {time.perf_counter() - started:.1f}s"
                    )
                    have = level
                    jobs.settle()
                deadline.check(f"filling {_k(level)} scheduled rows")
                results[level] = _claim_level(ctx, jobs, store, probe, deadline)
        except (ServerDied, pymysql.err.MySQLError, OSError) as exc:
            failed = (level, _why(jobs, exc))
        except Exception as exc:
            if jobs.srv is None or not jobs.srv.trouble():
                raise
            failed = (level, _why(jobs, exc))
        finally:
            store.close()
            if probe is not None:
                probe.close()
    _claim_figures(ctx, results, status)
    if failed is not None:
        level, why = failed
        ctx.error(f"claim with {_k(level)} scheduled", why)
        ctx.note(f"with {_k(level)} scheduled jobs: {why}")


def _why(jobs: Jobs, exc: BaseException) -> str:
    trouble = jobs.srv.trouble() if jobs.srv is not None else None
    if trouble:
        return f"the server aborted: {trouble}"
    return f"{type(exc).__name__}: {exc}"


def _claim_figures(ctx: Ctx, results: dict[int, dict[str, Any]], status: str) -> None:
    sz = ctx.sizes
    summary: dict[int, dict[str, float]] = {}
    for level, r in results.items():
        times = r["times"]
        s = summary[level] = {"ms": _median(times)}
        ctx.fig(
            f"claim(20) time, {_k(level)} scheduled",
            s["ms"],
            "ms",
            note=f"median of {len(times)}; p95 {_pct(times, 95):.2f}; {sz.claim_due} due jobs"
            f" waiting; scheduled rows are '{status}'",
        )
        probes = [p for p in r["probes"] if "select" in p or "locks" in p]
        if not probes:
            continue
        mid = sorted(probes, key=lambda p: _reads_total(p.get("select", {})))[len(probes) // 2]
        s["read"] = float(_reads_total(mid.get("select", {})))
        ctx.fig(
            f"claim rows read, {_k(level)} scheduled",
            s["read"],
            "rows",
            note=f"claim_select's Handler_read_* + icp filtered: {_reads_note(mid.get('select', {}))};"
            f" whole claim transaction {_reads_total(mid.get('tx', {})):,};"
            f" SELECT {mid.get('select_ms', 0):.2f} ms; median of {len(probes)}",
        )
        locks = mid.get("locks") or {}
        if locks:
            s["locked"] = float(locks["rows_locked"])
            ctx.fig(
                f"claim rows locked, {_k(level)} scheduled",
                s["locked"],
                "rows",
                note=f"INNODB_TRX at commit: {locks['lock_structs']:,} lock structs,"
                f" {int(locks['lock_memory']) / 1024:,.0f} KiB lock memory,"
                f" {locks['rows_modified']} rows modified, {locks['isolation']}",
            )
        inserts = [p["inserts"] for p in probes if "inserts" in p]
        if inserts:
            worst = max(max(i["forkq_delayed_ms"], i["raw_due_ms"]) for i in inserts)
            timeouts = sum(int(i.get("timeouts", 0)) for i in inserts)
            ctx.fig(
                f"INSERT while a claim is open, {_k(level)} scheduled (worst)",
                worst,
                "ms",
                target=("<=", 50.0),
                note=f"{timeouts} of {2 * len(inserts)} INSERTs hit the 1 s lock wait timeout;"
                " forkq's enqueue(delay=86400) and a raw INSERT due now, into the claimed queue",
            )
    levels = sorted(summary)
    if len(levels) < 2:
        return
    low, high = levels[0], levels[-1]
    for key, label in (("ms", "time"), ("read", "rows read"), ("locked", "rows locked")):
        if key in summary[low] and key in summary[high] and summary[low][key] > 0:
            ctx.fig(
                f"claim {label} ratio, {_k(high)} / {_k(low)} scheduled",
                summary[high][key] / summary[low][key],
                "x",
                target=("<=", 1.2),
                note=f"{summary[low][key]:,.2f} → {summary[high][key]:,.2f}",
            )


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


def tick(ctx: Ctx, deadline: Any) -> None:
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


# --- 3. same-host and other-host wake-up ----------------------------------------------------


def _has_nudge() -> bool:
    try:
        import supervisor.wake  # noqa: F401
    except ImportError:
        return False
    return "wake" in inspect.signature(Queue.__init__).parameters


def _producer(url: str, nudge: bool) -> Queue:
    """A producer on this host, or one that behaves as if on another (no nudge)."""
    if nudge:
        return Queue(url)
    if "wake" in inspect.signature(Queue.__init__).parameters:
        return Queue(url, wake=False)  # type: ignore[call-arg]
    was = os.environ.get("FORKQ_WAKE")
    os.environ["FORKQ_WAKE"] = "0"
    try:
        return Queue(url)
    finally:
        if was is None:
            os.environ.pop("FORKQ_WAKE", None)
        else:
            os.environ["FORKQ_WAKE"] = was


def _latencies(
    made: Any, url: str, nudge: bool, record: Path, n: int, gap: float, deadline: Any
) -> list[float]:
    """Enqueue n t.record jobs `gap` apart; milliseconds from just before each enqueue to
    the handler's first act (its start stamp)."""
    q = _producer(url, nudge)
    enqueued: dict[int, float] = {}
    try:
        q.enqueue("t.noop", {}, queue="elsewhere", delay=3600)  # connect outside the clock
        origin = time.monotonic()
        for i in range(n):
            pause = origin + i * gap - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            t = time.time()
            enqueued[q.enqueue("t.record", {"file": str(record)}, queue="lat")] = t
    finally:
        q.close()
    while True:
        records = read_records(record)
        if len(records) >= len(enqueued):
            break
        if not made.alive():
            raise RuntimeError(f"daemon exited: {made.describe()[-400:]}")
        deadline.check("waiting for every start stamp")
        time.sleep(0.05)
    return sorted((records[j][1] - t) * 1000 for j, t in enqueued.items())


def wake(ctx: Ctx, deadline: Any) -> None:
    sz = ctx.sizes
    nudge = _has_nudge()
    results: dict[str, list[float]] = {}
    with wake_dir(ctx) as env, fresh_jobs(ctx.backend, "wake", ctx.workdir) as jobs:
        ctx.describe_server(jobs)
        made = daemon(ctx.workdir, jobs.url, "wake", {"lat": {"workers": 2}}, env=env)
        with running(made):
            time.sleep(1.0)  # boot settles
            for label, on in (("same host", True), ("other host", False)):
                record = ctx.workdir / f"wake-{label.replace(' ', '-')}.rec"
                results[label] = _latencies(
                    made, jobs.url, on, record, sz.wake_jobs, sz.wake_gap, deadline
                )
                time.sleep(0.5)
    how = (
        "producer nudges the daemon (supervisor/wake.py)"
        if nudge
        else "no nudge in this code: the poll"
    )
    for label, lat in results.items():
        mode = how if label == "same host" else "nudge off (Queue(wake=False)): the poll"
        note = f"n={len(lat)}, {sz.wake_gap * 1000:.0f} ms apart, W=2, poll_interval 50 ms; {mode}"
        target = 5.0 if label == "same host" else 50.0
        ctx.fig(
            f"{label}: enqueue → handler start p50",
            _pct(lat, 50),
            "ms",
            target=("<=", target),
            note=note,
        )
        ctx.fig(f"{label}: enqueue → handler start p99", _pct(lat, 99), "ms")


# --- 4. the master while the database is silent ---------------------------------------------

HANG_MODULE = "scalehandlers"
HANG_SOURCE = '''\
"""s.hang: ignores its soft timeout; notes when it starts and when SIGTERM reaches it."""

import os
import signal
import time

from supervisor import handler


@handler("s.hang")
def hang(payload, job):
    path = payload["file"]

    def note(what):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{what} {os.getpid()} {time.monotonic():.6f}\\n".encode())
        finally:
            os.close(fd)

    signal.signal(signal.SIGTERM, lambda signum, frame: note("term"))
    note("start")
    while True:  # only SIGKILL ends this job
        try:
            time.sleep(0.02)
        except BaseException:
            pass
'''


@contextlib.contextmanager
def silence(jobs: Jobs) -> Iterator[None]:
    """The database stops answering; it answers again afterwards, whatever happened."""
    if jobs.srv is not None:
        try:
            jobs.srv.freeze()
            yield
        finally:
            jobs.srv.thaw()
        return
    holder = sqlite3.connect(jobs.path, isolation_level=None, timeout=5)  # type: ignore[attr-defined]
    try:
        holder.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        with contextlib.suppress(sqlite3.Error):
            holder.execute("ROLLBACK")
        holder.close()


def _stop_while_silent(
    ctx: Ctx, jobs: Jobs, env: dict[str, str], i: int, quiet: bool = True
) -> float:
    """Seconds from SIGTERM to the master's exit, the database silent for 1 s before
    (`quiet`; else answering: the reference)."""
    made = daemon(
        ctx.workdir,
        jobs.url,
        f"silent-term-{i}-{quiet}",
        {"idle": {"workers": 2}},
        supervisor={"heartbeat_interval": 0.5},
        env=env,
    )
    with running(made), silence(jobs) if quiet else contextlib.nullcontext():
        time.sleep(1.0)  # the master is now inside a query that gets no answer
        started = time.monotonic()
        made.send_signal(signal.SIGTERM)
        assert made.proc is not None
        try:
            made.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return float("inf")
        return time.monotonic() - started


def _kill_while_silent(
    ctx: Ctx, jobs: Jobs, env: dict[str, str], i: int, quiet: bool = True
) -> tuple[float, float]:
    """An s.hang job with a 1 s timeout; the database goes silent as soon as it starts.
    Seconds from when its kill is due (start + timeout + the master's KILL_GRACE) to
    SIGTERM reaching it, and to the child's death."""
    grace = float(_lookup(("supervisor.daemon.master", "supervisor.master"), "KILL_GRACE") or 3.0)
    timeout = 1.0
    record = ctx.workdir / f"silent-kill-{i}-{quiet}.rec"
    made = daemon(
        ctx.workdir,
        jobs.url,
        f"silent-kill-{i}-{quiet}",
        {"hang": {"workers": 1, "timeout": timeout}},
        supervisor={"heartbeat_interval": 0.5},
        env=env,
        modules={HANG_MODULE: HANG_SOURCE},
    )
    with running(made):
        q = Queue(jobs.url)
        try:
            q.enqueue("s.hang", {"file": str(record)}, queue="hang")
        finally:
            q.close()
        limit = time.monotonic() + 15
        start: float | None = None
        child = 0
        while start is None and time.monotonic() < limit:
            for line in record.read_text().splitlines() if record.exists() else []:
                what, pid, at = line.split()
                if what == "start":
                    start, child = float(at), int(pid)
            time.sleep(0.005)
        if start is None:
            raise RuntimeError(f"the hanging job never started: {made.describe()[-400:]}")
        with silence(jobs) if quiet else contextlib.nullcontext():
            due = start + timeout + grace
            dead_at = None
            while time.monotonic() < due + 20:
                try:
                    gone = psutil.Process(child).status() == psutil.STATUS_ZOMBIE
                except psutil.NoSuchProcess:
                    gone = True
                if gone:
                    dead_at = time.monotonic()
                    break
                time.sleep(0.005)
        term_at = next(
            (
                float(ln.split()[2])
                for ln in record.read_text().splitlines()
                if ln.startswith("term")
            ),
            None,
        )
    to_term = float("inf") if term_at is None else term_at - due
    to_death = float("inf") if dead_at is None else dead_at - due
    return to_term, to_death


def silent(ctx: Ctx, deadline: Any) -> None:
    sz = ctx.sizes
    stops: list[float] = []
    kills: list[tuple[float, float]] = []
    with wake_dir(ctx) as env, fresh_jobs(ctx.backend, "silent", ctx.workdir) as jobs:
        ctx.describe_server(jobs)
        for i in range(sz.silent_runs):
            stops.append(_stop_while_silent(ctx, jobs, env, i))
            deadline.check("SIGTERM while the database is silent")
            kills.append(_kill_while_silent(ctx, jobs, env, i))
            deadline.check("an overtime kill while the database is silent")
        # The same once with the database answering: what the master takes anyway.
        healthy_stop = _stop_while_silent(ctx, jobs, env, 0, quiet=False)
        healthy_kill = _kill_while_silent(ctx, jobs, env, 0, quiet=False)
    how = (
        "mariadbd SIGSTOPped (then SIGCONT)"
        if ctx.backend == "mariadb"
        else "another connection holds the write lock (BEGIN EXCLUSIVE); WAL reads go on"
    )

    def shown(values: list[float]) -> str:
        return ", ".join("never" if v == float("inf") else f"{v:.2f}" for v in values)

    ctx.fig(
        "SIGTERM → master exit, database silent",
        _median(stops),
        "s",
        target=("<=", 1.0),
        note=f"median of {len(stops)}: {shown(stops)} s; 2 idle children; {how};"
        f" {healthy_stop:.2f} s with the database answering",
    )
    terms = [t for t, _ in kills]
    deaths = [d for _, d in kills]
    ctx.fig(
        "overtime kill, database silent: due → SIGTERM at the job",
        _median(terms),
        "s",
        target=("<=", 1.0),
        note=f"median of {len(terms)}: {shown(terms)} s; due = start + timeout 1 s +"
        f" KILL_GRACE; the job ignores its soft timeout; {how};"
        f" {healthy_kill[0]:.2f} s with the database answering",
    )
    ctx.fig(
        "overtime kill, database silent: due → child dead",
        _median(deaths),
        "s",
        note=f"median of {len(deaths)}: {shown(deaths)} s; the job ignores SIGTERM too, so"
        f" SIGKILL ends it (TERM_TO_KILL after SIGTERM); {healthy_kill[1]:.2f} s with the"
        " database answering",
    )


# --- 5. the "Done when" reproduction --------------------------------------------------------


def _server_counters(jobs: Jobs) -> dict[str, int] | None:
    if jobs.srv is None or jobs.srv.trouble():
        return None
    try:
        out = jobs.srv.global_status("Handler_read%")
        out.update(jobs.srv.global_status("Handler_icp%"))
        out.update(jobs.srv.global_status("Innodb_row_lock_%"))
        out.update(jobs.srv.global_status("Innodb_deadlocks"))
        out.update(jobs.srv.index_reads(jobs.name))  # type: ignore[attr-defined]
        return out
    except pymysql.err.MySQLError:
        return None


def _trickle_run(
    ctx: Ctx, jobs: Jobs, env: dict[str, str], tag: str, deadline: Any
) -> dict[str, Any]:
    """`forkq run` with a pool `s` (W=2, production timers); `trickle_jobs` t.record jobs
    enqueued at `trickle_rate` per second from this process; until all ran or the server
    died. Global server counters before and after (a private server: only us)."""
    sz = ctx.sizes
    record = ctx.workdir / f"trickle-{tag}.rec"
    made = daemon(ctx.workdir, jobs.url, f"trickle-{tag}", {QUEUE: {"workers": 2}}, env=env)
    out: dict[str, Any] = {"enqueued": 0, "done": 0, "enqueue_ms": [], "died": None}
    launched = time.monotonic()

    def stop(why: str | None) -> None:
        if why and not out["died"]:
            out["died"] = f"{why} ({time.monotonic() - launched:.1f}s after forkq run started)"

    with running(made):
        time.sleep(1.0)  # boot settles: registrations, the first polls
        before = _server_counters(jobs)
        q = Queue(jobs.url)
        enqueued: dict[int, float] = {}
        try:
            origin = time.monotonic()
            for i in range(sz.trickle_jobs):
                pause = origin + i / sz.trickle_rate - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                t = time.time()
                started = time.perf_counter()
                try:
                    job_id = q.enqueue("t.record", {"file": str(record)}, queue=QUEUE)
                except Exception as exc:
                    trouble = jobs.srv.trouble() if jobs.srv else None
                    stop(trouble or f"enqueue {i + 1} failed: {type(exc).__name__}: {exc}")
                    break
                out["enqueue_ms"].append((time.perf_counter() - started) * 1000)
                enqueued[job_id] = t
                if jobs.srv is not None and i % 10 == 0 and jobs.srv.trouble():
                    stop(jobs.srv.trouble())
                    break
                if deadline.remaining() < 30:
                    stop("section deadline: trickle cut short")
                    break
        finally:
            q.close()
        out["enqueued"] = len(enqueued)
        limit = time.monotonic() + min(60.0, max(5.0, deadline.remaining() - 20))
        while time.monotonic() < limit:
            if len(read_records(record)) >= len(enqueued):
                break
            if jobs.srv is not None and jobs.srv.trouble():
                stop(jobs.srv.trouble())
                break
            time.sleep(0.05)
        records = read_records(record)
        out["done"] = sum(1 for j in enqueued if j in records)
        lat = sorted((records[j][1] - t) * 1000 for j, t in enqueued.items() if j in records)
        out["latency"] = lat
        after = _server_counters(jobs)
    if before is not None and after is not None:
        out["delta"] = {k: after[k] - before.get(k, 0) for k in after}
    if jobs.srv is not None:
        out["fatal"] = jobs.srv.fatal_lines()
        out["alive"] = jobs.srv.alive()
    return out


def trickle(ctx: Ctx, deadline: Any) -> None:
    sz = ctx.sizes
    runs: dict[int, dict[str, Any]] = {}
    with wake_dir(ctx) as env, fresh_jobs(ctx.backend, "trickle", ctx.workdir) as jobs:
        ctx.describe_server(jobs)
        runs[0] = _trickle_run(ctx, jobs, env, "0", deadline)
        started = time.perf_counter()
        status = jobs.scheduled_status()
        jobs.fill("scheduled", 1, sz.trickle_scheduled)
        ctx.note(
            f"{_k(sz.trickle_scheduled)} scheduled jobs (status '{status}') in"
            f" {time.perf_counter() - started:.1f}s"
        )
        jobs.settle()
        deadline.check("filling scheduled jobs")
        if jobs.srv is not None:
            runs[-1] = {"stats_reads": _stats_reads(jobs)}
        runs[sz.trickle_scheduled] = _trickle_run(ctx, jobs, env, "1", deadline)
        if jobs.srv is not None and jobs.srv.trouble():
            ctx.note(f"the server aborted: {jobs.srv.trouble()}")
    _trickle_figures(ctx, runs)


def _stats_reads(jobs: Jobs) -> dict[str, Any]:
    """Rows one `stats` call reads as the check tick makes it (session counters)."""
    store = open_store(jobs.url)
    try:
        call, how = _stats_call(store, jobs.url)
        call()  # connects
        conn = store._connection()  # type: ignore[attr-defined]
        before = _handler_reads(conn)
        call()
        return {"rows": _reads_total(_delta(before, _handler_reads(conn))), "how": how}
    finally:
        store.close()


def _claim_path(run: dict[str, Any]) -> float | None:
    """Rows read per job in forkq_jobs_claim and PRIMARY (INDEX_STATISTICS): the claims
    and the acks, without the check tick's and the poll's reads of forkq_jobs_status."""
    delta = run.get("delta") or {}
    if not run.get("done") or "index forkq_jobs_claim" not in delta:
        return None
    rows = delta.get("index forkq_jobs_claim", 0) + delta.get("index PRIMARY", 0)
    return float(rows) / run["done"]


def _rows_read(run: dict[str, Any]) -> float | None:
    delta = run.get("delta")
    if not delta or not run["done"]:
        return None
    return _reads_total(delta) / run["done"]


def _handler_breakdown(run: dict[str, Any]) -> str:
    delta = run.get("delta") or {}
    parts = [
        f"{k.replace('Handler_read_', '').replace('Handler_', '')} {v / run['done']:,.1f}"
        for k, v in sorted(delta.items())
        if k.startswith("Handler_") and v and run["done"]
    ]
    return "; per job: " + ", ".join(parts) if parts else ""


def _per_index(run: dict[str, Any]) -> str:
    """Where the reads went: INDEX_STATISTICS rows read per job, per index of forkq_jobs."""
    delta = run.get("delta") or {}
    parts = [
        f"{k.removeprefix('index ')} {v / run['done']:,.1f}"
        for k, v in sorted(delta.items())
        if k.startswith("index ") and v and run["done"]
    ]
    return "; per job by index (INDEX_STATISTICS): " + ", ".join(parts) if parts else ""


def _trickle_figures(ctx: Ctx, runs: dict[int, dict[str, Any]]) -> None:
    sz = ctx.sizes
    high = sz.trickle_scheduled
    probe = runs.pop(-1, {}).get("stats_reads")
    for level, run in runs.items():
        lat = run.get("latency") or []
        note = (
            f"{run['done']} of {run['enqueued']} enqueued ran (of {sz.trickle_jobs});"
            f" {sz.trickle_rate:.0f} jobs/s, W=2"
            + (
                f"; start latency p50 {_pct(lat, 50):.1f} ms, p99 {_pct(lat, 99):.1f} ms"
                if lat
                else ""
            )
            + (f"; slowest enqueue {max(run['enqueue_ms']):.1f} ms" if run["enqueue_ms"] else "")
            + (f"; STOPPED: {run['died']}" if run.get("died") else "")
            + _handler_breakdown(run)
        )
        if ctx.backend == "mariadb":
            ctx.fig(
                f"trickle, {_k(level)} scheduled: rows read per job",
                _rows_read(run),
                "rows",
                note=note
                + "; global Handler_read_* + ICP-filtered delta / jobs run"
                + _per_index(run),
            )
        else:
            ctx.fig(
                f"trickle, {_k(level)} scheduled: start latency p50",
                _pct(lat, 50) if lat else None,
                "ms",
                note=note,
            )
    loaded = runs.get(high)
    if loaded is None:
        return
    ctx.fig(
        f"trickle, {_k(high)} scheduled: jobs run",
        float(loaded["done"]),
        "jobs",
        target=(">=", float(sz.trickle_jobs)),
    )
    if ctx.backend != "mariadb":
        return
    fatal = loaded.get("fatal") or []
    ctx.fig(
        f"trickle, {_k(high)} scheduled: server aborts ([FATAL] in its log)",
        float(len([f for f in fatal if "[FATAL]" in f])),
        "",
        target=("<=", 0.0),
        note=("; ".join(fatal[:2])[:300] if fatal else "none; mariadbd alive")
        + ("" if loaded.get("alive") else "; mariadbd is gone"),
    )
    base_read, high_read = _rows_read(runs[0]), _rows_read(loaded)
    if base_read and high_read is not None:
        tick = (
            f"; one check-tick {probe['how']} reads {probe['rows']:,} rows with {_k(high)}"
            " scheduled (session counters): the tick runs every 10 s, the trickle lasts ~11 s"
            if probe
            else ""
        )
        ctx.fig(
            f"trickle rows read per job ratio, {_k(high)} / 0 scheduled",
            high_read / base_read,
            "x",
            target=("<=", 1.5),
            note=f"{base_read:,.1f} → {high_read:,.1f}; every read on the server{tick}",
        )
        base_claim, high_claim = _claim_path(runs[0]), _claim_path(loaded)
        if base_claim and high_claim is not None:
            ctx.fig(
                f"trickle claim-path rows read per job ratio, {_k(high)} / 0 scheduled",
                high_claim / base_claim,
                "x",
                target=("<=", 1.5),
                note=f"{base_claim:,.1f} → {high_claim:,.1f}; forkq_jobs_claim + PRIMARY"
                " (INDEX_STATISTICS): claims and acks, not the tick's or the poll's reads of"
                " forkq_jobs_status",
            )
    else:
        ctx.error(
            f"trickle rows read per job ratio, {_k(high)} / 0 scheduled",
            "not measurable: " + (loaded.get("died") or "no counters"),
        )
    delta = loaded.get("delta")
    if delta is not None:
        ctx.fig(
            f"trickle, {_k(high)} scheduled: row lock waits",
            float(delta.get("Innodb_row_lock_waits", 0)),
            "",
            target=("<=", 0.0),
            note=f"Innodb_row_lock_waits delta (global; the daemon's and the producer's);"
            f" lock wait time {delta.get('Innodb_row_lock_time', 0)} ms;"
            f" slowest enqueue {max(loaded['enqueue_ms'] or [0]):.1f} ms",
        )
    elif loaded["enqueue_ms"]:
        ctx.fig(
            f"trickle, {_k(high)} scheduled: slowest enqueue",
            max(loaded["enqueue_ms"]),
            "ms",
            note="server counters unavailable: " + (loaded.get("died") or ""),
        )


RUNNERS: dict[str, Callable[[Ctx, Any], None]] = {
    "claims": claims,
    "tick": tick,
    "wake": wake,
    "silent": silent,
    "trickle": trickle,
}

METHOD = [
    "- **claims / tick / wake / silent / trickle** (benchmarks/scale.py): MariaDB figures come"
    " from a private `mariadbd` the bench starts on its own port and data directory (the"
    " tests' tests/private_mariadb.py launcher) with MariaDB's defaults: innodb_buffer_pool_size"
    " 128 MiB, innodb_log_file_size 96 MiB; innodb_lock_wait_timeout 2 s so a blocked INSERT"
    " fails in bounded time. Rows are arranged with INSERT ... SELECT over the SEQUENCE engine"
    " (SQLite: a recursive CTE); scheduled rows have run_at a day ahead and the status"
    " forkq's own `enqueue(delay=86400)` writes (probed). Daemons are `forkq run` started by"
    " the tests' launcher (tests/daemon_util.py) with production timers (poll 50 ms,"
    " heartbeat 5 s, check tick 10 s).",
    "- **claims**: queue `s` with 0 / 100k / 1M scheduled jobs and 5 due jobs at each claim;"
    " `store.claim(s, owner, 20, 60)` as shipped. Rows read: the session's Handler_read_*"
    " around `claim_select` plus the entries index condition pushdown filtered inside InnoDB"
    " (Handler_icp_attempts - Handler_icp_match), and the whole claim transaction's in the"
    " note; rows locked:"
    " INNODB_TRX.trx_rows_locked read by a second connection while the claim transaction"
    " waits at its COMMIT (a hook on the store's connection), where forkq's enqueue of a"
    " delayed job and a raw INSERT due now (REPEATABLE READ, lock wait timeout 1 s) are also"
    " tried. Claim time: median of 20 claims (SQLite: the only figure).",
    "- **tick**: 10k / 1M / 5M rows over 4 queues (4/5 done with one in ten dead, 1/5"
    " scheduled, 100 ready of which 20 running under a lease); each of `stats()`,"
    " `expired_leases()`, `paused_queues()`, `count_ready(q, 1000)` and `due_queues(queues)`"
    " (`poll` where it exists) timed, median of 3; the sum is the figure. `forkq status"
    " --json` is timed as a program (interpreter start included).",
    "- **wake**: an idle daemon (pool `lat`, W=2, poll_interval 50 ms); 200 `t.record` jobs"
    " 20 ms apart, `time.time()` just before each enqueue; the handler's start stamp minus"
    " that. Same host: `Queue(url)` (it nudges the local daemon where the code can); other"
    " host: `Queue(url, wake=False)`, i.e. the poll. Both use a runtime directory of the"
    " bench's own (FORKQ_RUNTIME_DIR).",
    "- **silent**: SIGTERM: a daemon with 2 idle children, the database silenced for 1 s, then"
    " SIGTERM; seconds until the master has exited. Overtime kill: a job with timeout 1 s"
    " that ignores its soft timeout and SIGTERM (it notes when SIGTERM reaches it); the"
    " database is silenced as soon as it starts; the kill is due at start + 1 s +"
    " KILL_GRACE; the child's death is polled every 5 ms. Median of 3 runs each.",
    "- **trickle**: issue 11's reproduction: `forkq run` with a pool `s` (W=2); 200 jobs"
    " enqueued at 20/s; first with nothing scheduled, then after 1M scheduled jobs in `s`."
    " Rows read per job: the server's global Handler_read_* (+ ICP-filtered) delta over the"
    " trickle / jobs run (the private server serves nothing else: claims, acks, the poll, the"
    " check tick and temporary tables all count); userstat's INDEX_STATISTICS splits it per"
    " index, and the claim path alone is forkq_jobs_claim + PRIMARY. Lock waits:"
    " Innodb_row_lock_waits delta; the server's error log is searched for [FATAL].",
]

REPRODUCE = [
    "```sh",
    ".venv/bin/python benchmarks/run.py --sections scale+ --no-write    # every scale figure",
    ".venv/bin/python benchmarks/run.py --backends mariadb --sections trickle --no-write",
    ".venv/bin/python benchmarks/run.py --sections claims,tick --quick --no-write",
    "```",
]
