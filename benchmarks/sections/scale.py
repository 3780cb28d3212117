"""Section scale: claim + complete with 10k vs 1M finished rows in the queue (two
databases, batches alternating so a noisy neighbour slows both alike), a ready backlog,
the master's idle poll (`due_queues`) and `store.stats()`; the query plans."""

from __future__ import annotations

import json
import os
import socket
import statistics
import time

from backends import Backend
from harness import QUEUE, Bench, Deadline

from supervisor.store import Store, open_store


def run(bench: Bench, deadline: Deadline) -> None:
    """Claim cost on a 10k-row and a 1M-row table, batches alternating between the two
    (two databases), so a noisy neighbour slows both alike; then a ready backlog."""
    s = bench.s
    bench.b.reset()
    small_b = bench.b.sibling("small")
    small_b.setup()
    owner = f"{socket.gethostname()}:{os.getpid()}:bench"
    claim_params = {"queue": QUEUE, "limit": 20, "now": time.time()}
    stores: list[Store] = []
    try:
        small_b.fill_finished(1, s.scale_small)
        filled = time.perf_counter()
        bench.b.fill_finished(1, s.scale_large)
        bench.report.notes.append(
            f"{bench.b.name}: {s.scale_large:,} finished rows inserted in"
            f" {time.perf_counter() - filled:.1f}s"
        )
        deadline.check("filling finished rows")
        pairs = []
        for backend in (small_b, bench.b):
            backend.add_ready(s.scale_ready)
            backend.settle(deadline)
            stores.append(open_store(backend.admin_url))
            pairs.append((backend, stores[-1], []))
        rounds = 10
        for _ in range(rounds):
            for backend, store, times in pairs:
                times.extend(
                    _batches(bench, backend, store, owner, s.scale_batches // rounds, deadline)
                )
        small, large = (_summary(bench, b, st, t) for b, st, t in pairs)
        bench.plan(
            bench.b,
            stores[1],
            f"claim_select, {s.scale_large:,} finished + {s.scale_ready:,} ready rows",
            "claim_select",
            claim_params,
        )
        bench.plan(
            bench.b,
            stores[1],
            f"due_queues (the master's idle poll), {s.scale_large:,} finished rows",
            "due_queues",
            {"queues": json.dumps([QUEUE]), "now": time.time()},
        )
        small_b.add_ready(s.scale_backlog - s.scale_ready)
        small_b.settle(deadline)
        backlog = _summary(
            bench,
            small_b,
            stores[0],
            _batches(bench, small_b, stores[0], owner, s.scale_backlog_batches, deadline),
        )
        bench.plan(
            small_b,
            stores[0],
            f"claim_select, {s.scale_backlog:,} ready rows (a backlog)",
            "claim_select",
            claim_params,
        )
        due = {"queues": json.dumps([QUEUE]), "now": time.time()}  # due_queues binds JSON
        due_small = small_b.query_ms(stores[0].queries["due_queues"], due, 20)
        small_b.add_ready(s.scale_backlog * 3)  # a 4x larger backlog
        due_large = small_b.query_ms(stores[0].queries["due_queues"], due, 20)
        # A queue of its own: the rows deleted above must not be in the scanned ranges.
        small_b.add_ready(s.scale_backlog, delay=86400.0, queue="delayed")
        small_b.add_ready(5, queue="delayed")
        small_b.settle(deadline)
        bench.plan(
            small_b,
            stores[0],
            f"claim_select, {s.scale_backlog:,} delayed + 5 due rows (the other hard case)",
            "claim_select",
            {**claim_params, "queue": "delayed"},
        )
    finally:
        for store in stores:
            store.close()
        small_b.teardown()
    _scale_figures(bench, small, large, backlog, due_small, due_large)
    bench.b.reset()


def _scale_figures(
    bench,
    small: dict[str, float],
    large: dict[str, float],
    backlog: dict[str, float],
    due_small: float,
    due_large: float,
) -> None:
    s = bench.s
    for size, r in ((s.scale_small, small), (s.scale_large, large)):
        bench.fig(
            "scale",
            f"claim(20) + complete, {size:,} finished rows",
            r["median"],
            "ms/batch",
            note=f"mean {r['mean']:.2f}, p95 {r['p95']:.2f}; {s.scale_batches} batches,"
            f" {s.scale_ready:,} ready",
        )
    bench.fig(
        "scale",
        f"claim cost ratio {s.scale_large:,} / {s.scale_small:,} finished (median)",
        large["median"] / small["median"],
        "x",
        target=("<=", 1.2),
        note=f"mean ratio {large['mean'] / small['mean']:.2f}; batches alternate between"
        " the two tables",
    )
    bench.fig(
        "scale",
        f"claim query alone, {s.scale_large:,} / {s.scale_small:,} finished (median)",
        large["query"] / small["query"],
        "x",
        note=f"{small['query']:.2f} → {large['query']:.2f} ms; the claim's SELECT in a"
        " rolled-back transaction: no commit, no fsync",
    )
    bench.fig(
        "scale",
        f"claim(20) + complete, {s.scale_backlog:,} ready backlog",
        backlog["median"],
        "ms/batch",
        note=f"{s.scale_backlog_batches} batches; claim query alone {backlog['query']:.2f} ms;"
        " not in the brief's targets",
    )
    bench.fig(
        "scale",
        f"claim cost ratio {s.scale_backlog:,} / {s.scale_ready:,} ready (median)",
        backlog["median"] / small["median"],
        "x",
        note="the claim should not grow with the backlog either",
    )
    bench.fig(
        "scale",
        f"due_queues (master's idle poll), {s.scale_backlog * 4:,} ready rows",
        due_large,
        "ms",
        note=f"{due_small:.2f} ms with {s.scale_backlog:,}; runs every poll_interval (50 ms)"
        " while a child is idle, e.g. when every ready job is delayed",
    )
    bench.fig(
        "scale",
        f"store.stats() with {s.scale_large:,} rows",
        large["stats"],
        "ms",
        note=f"{small['stats']:.1f} ms with {s.scale_small:,}; the chores leader runs it"
        " every check_interval",
    )


def _batches(
    bench: Bench, backend: Backend, store: Store, owner: str, batches: int, deadline: Deadline
) -> list[float]:
    """Milliseconds of `claim(20)` + `complete` per batch; the ready set is refilled."""
    times = []
    store.claim(QUEUE, owner, 1, 60)  # warm the connection and the plan
    for _ in range(batches):
        started = time.perf_counter()
        rows = store.claim(QUEUE, owner, 20, 60)
        store.complete(owner, [r.id for r in rows], "delete")
        times.append((time.perf_counter() - started) * 1000)
        if len(rows) != 20:
            raise RuntimeError(f"claimed {len(rows)} rows, expected 20")
        backend.add_ready(20)  # keep the ready set at its size (not timed)
        deadline.check("timing claims")
    return times


def _summary(bench: Bench, backend: Backend, store: Store, times: list[float]) -> dict[str, float]:
    started = time.perf_counter()
    store.stats()
    stats_ms = (time.perf_counter() - started) * 1000
    params = {"queue": QUEUE, "limit": 20, "now": time.time()}
    return {
        "median": statistics.median(times),
        "mean": statistics.fmean(times),
        "p95": statistics.quantiles(times, n=20)[18],
        "stats": stats_ms,
        "query": backend.query_ms(store.queries["claim_select"], params, 50),
    }


METHOD = [
    "- **scale**: finished rows (`done`, one in ten `dead`, `finished_at` set) in the same"
    " queue, plus 1,000 ready jobs: 10k in a second database (`<name>_small`, SQLite: a"
    " second file), 1M in the bench database; `store.claim(queue, owner, 20, 60)` +"
    " `store.complete(...)` timed per batch, the two databases taking turns in ten rounds so"
    " a noisy neighbour slows both alike, the ready set refilled after each batch (not"
    " timed). The median per batch is the figure (commit jitter dominates the mean). The"
    " backlog and `due_queues` figures use the small database with 50k / 200k ready rows.",
]
