"""Section claims: rows read and locked per claim with 0 / 100k / 1M scheduled jobs (run_at
a day ahead) in the claiming queue, the claim's time, and whether an enqueue waits while a
claim transaction is open (SQLite: the claim time only)."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pymysql
import scale_env
from scale_env import Jobs, ServerDied, fresh_jobs

from supervisor import Queue
from supervisor.building import build_job
from supervisor.store import Store, open_store

from .scale_common import (
    QUEUE,
    Ctx,
    _delta,
    _handler_reads,
    _k,
    _median,
    _owner,
    _pct,
    _reads_total,
)

READ_LIMIT = 20  # the claim batch these figures were first taken with (the default was 20)


def _enqueue_due(url: str, n: int, queue: str = QUEUE) -> None:
    q = Queue(url)
    try:
        q.enqueue_many([{"handler": "t.noop", "payload": {}, "queue": queue}] * n)
    finally:
        q.close()


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


def run(ctx: Ctx, deadline: Any) -> None:
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


METHOD = [
    "- **claims**: queue `s` with 0 / 100k / 1M scheduled jobs and 5 due jobs at each claim;"
    " `store.claim(s, owner, 20, 60)` as shipped. Rows read: the session's Handler_read_*"
    " around `claim_select` plus the entries index condition pushdown filtered inside InnoDB"
    " (Handler_icp_attempts - Handler_icp_match), and the whole claim transaction's in the"
    " note; rows locked:"
    " INNODB_TRX.trx_rows_locked read by a second connection while the claim transaction"
    " waits at its COMMIT (a hook on the store's connection), where forkq's enqueue of a"
    " delayed job and a raw INSERT due now (REPEATABLE READ, lock wait timeout 1 s) are also"
    " tried. Claim time: median of 20 claims (SQLite: the only figure).",
]
