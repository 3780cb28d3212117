"""Section trickle: issue 11's "Done when": 1M scheduled jobs, then a trickle of due jobs
drained by `forkq run`; the server must live, rows read per job within 1.5x of the same
trickle with nothing scheduled, and no enqueue waiting on a lock."""

from __future__ import annotations

import time
from typing import Any

import pymysql
from scale_env import Jobs, daemon, fresh_jobs, read_records, running

from supervisor import Queue
from supervisor.store import open_store

from .scale_common import (
    QUEUE,
    Ctx,
    _delta,
    _handler_reads,
    _k,
    _pct,
    _reads_total,
    _stats_call,
    wake_dir,
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


def run(ctx: Ctx, deadline: Any) -> None:
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
    """Rows read per job in the claim's index (forkq_jobs_limit since schema 19) and
    PRIMARY (INDEX_STATISTICS): the claims and the acks, without the check tick's and the
    poll's reads of forkq_jobs_status."""
    delta = run.get("delta") or {}
    if not run.get("done") or f"index {CLAIM_INDEX}" not in delta:
        return None
    rows = delta.get(f"index {CLAIM_INDEX}", 0) + delta.get("index PRIMARY", 0)
    return float(rows) / run["done"]


CLAIM_INDEX = "forkq_jobs_limit"


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
                note=f"{base_claim:,.1f} → {high_claim:,.1f}; forkq_jobs_limit + PRIMARY"
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


METHOD = [
    "- **trickle**: issue 11's reproduction: `forkq run` with a pool `s` (W=2); 200 jobs"
    " enqueued at 20/s; first with nothing scheduled, then after 1M scheduled jobs in `s`."
    " Rows read per job: the server's global Handler_read_* (+ ICP-filtered) delta over the"
    " trickle / jobs run (the private server serves nothing else: claims, acks, the poll, the"
    " check tick and temporary tables all count); userstat's INDEX_STATISTICS splits it per"
    " index, and the claim path alone is forkq_jobs_limit + PRIMARY. Lock waits:"
    " Innodb_row_lock_waits delta; the server's error log is searched for [FATAL].",
]
