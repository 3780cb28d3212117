"""Section wake: enqueue → handler start on an idle daemon, from this host (the
producer's nudge, when the code has one) and as from another host (nudge off: the poll)."""

from __future__ import annotations

import inspect
import os
import time
from pathlib import Path
from typing import Any

from scale_env import daemon, fresh_jobs, read_records, running

from supervisor import Queue

from .scale_common import (
    Ctx,
    _pct,
    wake_dir,
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


def run(ctx: Ctx, deadline: Any) -> None:
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


METHOD = [
    "- **wake**: an idle daemon (pool `lat`, W=2, poll_interval 50 ms); 200 `t.record` jobs"
    " 20 ms apart, `time.time()` just before each enqueue; the handler's start stamp minus"
    " that. Same host: `Queue(url)` (it nudges the local daemon where the code can); other"
    " host: `Queue(url, wake=False)`, i.e. the poll. Both use a runtime directory of the"
    " bench's own (FORKQ_RUNTIME_DIR).",
]
