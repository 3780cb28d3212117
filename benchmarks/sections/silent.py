"""Section silent: the master's reaction while the database does not answer (MariaDB:
the private server SIGSTOPped; SQLite: another connection holds the write lock):
SIGTERM → master gone, and an overtime kill's lateness."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import psutil
from scale_env import Jobs, daemon, fresh_jobs, running

from supervisor import Queue

from .scale_common import (
    Ctx,
    _lookup,
    _median,
    wake_dir,
)

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
            # One attempt: a killed hang job retried later would run ahead of the next
            # iteration's (workers 1) and write to its own record, not this one.
            q.enqueue("s.hang", {"file": str(record)}, queue="hang", max_attempts=1)
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


def run(ctx: Ctx, deadline: Any) -> None:
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


METHOD = [
    "- **silent**: SIGTERM: a daemon with 2 idle children, the database silenced for 1 s, then"
    " SIGTERM; seconds until the master has exited. Overtime kill: a job with timeout 1 s"
    " that ignores its soft timeout and SIGTERM (it notes when SIGTERM reaches it); the"
    " database is silenced as soon as it starts; the kill is due at start + 1 s +"
    " KILL_GRACE; the child's death is polled every 5 ms. Median of 3 runs each.",
]
