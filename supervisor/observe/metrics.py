"""The recording functions: what the master and the workers call, no-ops while off.

With `[metrics] listen` the master makes a private directory at boot and names it in
PROMETHEUS_MULTIPROC_DIR before any fork, so every child records into mmap files
there (prometheus-client's multiprocess mode), and forks the metrics server
(server.py), which reads them on each scrape. Without it every function here returns
at its first line and prometheus-client is never imported: a worker pays one global
lookup per job.

The master's side, in the order it calls it: `boot` before handler modules load,
`start` before the first child, `loop_turned` every loop turn, `record_pools` every
second, `reaped` / `child_exited` / `job_settled` on reaps, `tick_report` per check-tick
report, `db_error` per failed master query, `reload` on HUP, `shutdown` last. A worker
calls `job_finished` and `db_error`; every process's store calls `db_conflict` (hooked
at boot) for each transaction it runs again after a lost race.

Queue figures and alerts come from the check tick's report: only the host holding the
chores lease computes queue figures, so only its daemon exports `forkq_queue_*`
(`forkq_chores_leader` says which); alerts of host rules are exported by every host.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from supervisor import registry
from supervisor.config import Config
from supervisor.kinds import ChildExit, RetireReason
from supervisor.observe.health import db_limit
from supervisor.observe.master_side import DIR_PREFIX, MasterSide, stale_after, sweep_stale
from supervisor.observe.shared import Check, read_databases, write_databases
from supervisor.outcomes import Outcome
from supervisor.store import core

if TYPE_CHECKING:
    from supervisor.observe.series import JobSeries

DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# forkq_jobs_finished_total{outcome}: how an attempt ended (SPEC), one of the closed set
# outcomes.Outcome; a timeout is killed by the master, or the worker's soft timeout.
EXIT_REASONS = tuple(ChildExit)  # forkq_child_exits_total{reason}: see kinds.ChildExit
# Every series a daemon exports (SPEC "Metrics and health" names the first nine).
SERIES = (
    "forkq_queue_jobs",  # {queue,status}: ready, scheduled, running, dead, done (kept), waiting, cancelled
    "forkq_queue_oldest_ready_seconds",  # {queue}
    "forkq_jobs_finished_total",  # {queue,handler,outcome}
    "forkq_job_duration_seconds",  # histogram {queue,handler}
    "forkq_pool_workers",  # {pool,state}: busy, idle
    "forkq_pool_max_workers",  # {pool}
    "forkq_child_exits_total",  # {pool,reason}
    "forkq_db_errors_total",
    "forkq_alerts_firing",  # {rule,queue}
    "forkq_queue_paused",  # {queue}
    "forkq_chores_leader",
    "forkq_last_check_timestamp_seconds",
    "forkq_master_loop_timestamp_seconds",
    "forkq_db_conflicts_total",  # transactions run again after a lost race (issue 24)
)
UNREGISTERED = "(unregistered)"  # handler label of rows naming no registered handler

# Per process. `_directory` is inherited by every fork; the series are made by each
# process on first use (after a fork they are forgotten: see _forget).
_directory: str | None = None
_jobs: JobSeries | None = None
_master: MasterSide | None = None
# Several databases (observe/several.py): the database a master serves, set in it at its
# fork (it then serves no port); `_several` in the supervisor, whose server reads them all.
_database: str | None = None
_several = False


def _no_fds() -> list[int]:
    return []


_close_fds: Callable[[], list[int]] = _no_fds


class TickFigures(Protocol):
    """What `tick_report` reads of the check tick's report (cluster/tick.py TickReport)."""

    leader: bool
    db_error: str | None
    queues: list[dict[str, Any]] | None
    alerts: list[list[Any]]


# --- workers ---------------------------------------------------------------------------


def job_finished(queue: str, handler: str, outcome: Outcome, seconds: float) -> None:
    """A worker finished an attempt: count it and its duration."""
    if _directory is None:
        return
    # Handler names come from rows: only registered ones become label values, so rows
    # with made-up names cannot grow the series without bound. A series file that cannot
    # be made (a full disk, its directory gone) loses the figure, never the job's end.
    with contextlib.suppress(OSError):
        series = _jobs or _job_series()
        series.job(queue, handler if registry.get(handler) else UNREGISTERED, outcome, seconds)


def worker_started() -> None:
    """A worker makes its series at its start: its files (`KIND_PID.db`) then tell a
    master booting after a kill -9 of this one's that the directory is still in use."""
    if _directory is None:
        return
    with contextlib.suppress(OSError):
        _jobs or _job_series()


def db_error() -> None:
    """A database call failed (the master's, a check tick's as reported, a worker's)."""
    if _directory is None:
        return
    if _master is not None:
        _master.series.db_errors.inc()
    else:
        with contextlib.suppress(OSError):  # as job_finished
            (_jobs or _job_series()).db_errors.inc()


def db_conflict() -> None:
    """A transaction lost a race and is run again (store/core.py: its retry)."""
    if _directory is None:
        return
    with contextlib.suppress(OSError):  # as job_finished
        series = _master.series if _master is not None else (_jobs or _job_series())
        series.db_conflicts.inc()


def _job_series() -> JobSeries:
    global _jobs
    from supervisor.observe.series import JobSeries

    _jobs = JobSeries(_database)
    return _jobs


def _forget() -> None:
    """After any fork, in the child: the parent's series and server are not ours."""
    global _jobs, _master
    _jobs = None
    _master = None


# --- the master ------------------------------------------------------------------------


def boot(config: Config) -> None:
    """Before handler modules load and before any fork: the private directory, named in
    the environment every process forked later inherits (also handler code that uses
    prometheus-client in multiprocess mode: its series are served too)."""
    global _directory
    if config.metrics.listen is None or _directory is not None or _database is not None:
        return  # off, made already, or a master of several: the supervisor makes it
    sweep_stale(tempfile.gettempdir())
    _directory = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")  # mode 0700
    os.environ[DIR_ENV] = _directory
    os.register_at_fork(after_in_child=_forget)
    core.conflict_listeners.append(db_conflict)


def start(config: Config, close_fds: Callable[[], list[int]]) -> None:
    """In the master's boot, before the first child: its series, the server.

    `close_fds` returns the descriptors a process forked by the master must close (the
    master's and its children's pipes); it is called at each (re)start of the server.
    """
    global _master, _close_fds
    _close_fds = close_fds
    boot(config)
    if _directory is None or _master is not None or config.metrics.listen is None:
        return
    _master = MasterSide(_directory, config, close_fds, _database, _several)
    _master.pulse.beat()
    _master.write_check(Check(*_master.now_times(), _master.stale_after))  # boot's queries answered
    if _master.listen is not None:
        _master.start_server(time.monotonic(), boot=True)


def join(database: str) -> None:
    """In a master of several databases, at its fork: it records; the supervisor serves."""
    global _database
    _database = database


def several(config: Config, names: list[str]) -> None:
    """In the supervisor of several databases, at boot and on each reload: which exist
    and which holds each queue, for the server to label the series."""
    global _several
    _several = True
    if _directory is not None:
        # A database a reload removed keeps its queues: their counters stay in the
        # scrape (counters never go back), and must keep naming where they were counted.
        _, before = read_databases(_directory)
        now = {q: d.name for d in config.databases for q in d.queues}
        now |= {p.name: config.database_of(p.name) for p in config.pools}
        queues = {**before, **now}
        with contextlib.suppress(OSError):
            write_databases(_directory, names, queues)


def loop_turned(db_answered_at: float = 0.0, db_out: bool = False) -> None:
    """Every master loop turn: the pulse /healthz reads (with when the database last
    answered the master, and whether its breaker is open); a failed server's respawn."""
    if _master is None:
        return
    _master.pulse.beat(db_answered_at, _master.db_limit, db_out)
    if _master.server_pid is None and _master.listen is not None:
        now = time.monotonic()
        if now >= _master.next_start:
            _master.start_server(now)


def record_pools(max_workers: Mapping[str, int], children: Iterable[tuple[str, bool]]) -> None:
    """The pools as the master sees them: {pool: max_workers}, (pool, busy) per child."""
    if _master is not None:
        _master.series.pools(max_workers, children)


def child_exited(
    pool: str,
    *,
    exit_ok: bool,
    retire_reason: str,
    timed_out: bool,
    killed: bool,
    cancelled: bool = False,
) -> ChildExit:
    """A reaped pool child, counted under its label (exit_reason), which it returns."""
    reason = exit_reason(exit_ok, retire_reason, timed_out, killed, cancelled)
    if _master is not None:
        _master.series.child_exits.labels(pool, reason).inc()
    return reason


def job_settled(queue: str, outcome: Outcome, handler: str = "") -> None:
    """An attempt the master ended (a child killed past its job's timeout: TIMEOUT;
    cancelled while running: CANCELLED). The handler is "" only when the database did
    not answer the master's read of the job; an unregistered one is UNREGISTERED."""
    if _master is not None:
        label = handler if not handler or registry.get(handler) else UNREGISTERED
        _master.series.finished.labels(queue, label, outcome).inc()


def exit_reason(
    exit_ok: bool, retire_reason: str, timed_out: bool, killed: bool, cancelled: bool = False
) -> ChildExit:
    """A child's label: what the master did to it, else how it ended, else why it went."""
    if timed_out:
        return ChildExit.TIMEOUT
    if cancelled:
        return ChildExit.CANCELLED
    if killed:
        return ChildExit.KILLED
    if not exit_ok:
        return ChildExit.CRASHED
    reason = RetireReason.of(retire_reason)
    return ChildExit.EXITED if reason is None else reason.exit


def server_pid() -> int | None:
    """The metrics server's pid while it runs (the master knows it as its own child)."""
    return None if _master is None else _master.server_pid


def master_exited(pid: int) -> None:
    """In the supervisor of several databases: a master's gauges (its pools' workers)
    end with it; its counters stay (folded by the server)."""
    if _directory is None:
        return
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(_directory):
            if name.startswith("gauge_") and name.endswith(f"_{pid}.db"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(_directory, name))


def reaped(pid: int, status: int) -> bool:
    """True when `pid` was the metrics server (the master then has nothing to do)."""
    return _master is not None and _master.server_exited(pid, status)


def tick_report(report: TickFigures) -> None:
    """A check tick's report: the database state /healthz reads, the queue and alert
    figures the server exports (queue figures only from the chores holder)."""
    if _master is None:
        return
    if report.db_error is not None:
        _master.series.db_errors.inc()
    alerts = [(str(rule), str(queue), bool(firing)) for rule, queue, firing in report.alerts]
    alerts = _master.queue_alerts.kept(alerts, report.db_error is not None)
    check = Check(
        *_master.now_times(),
        _master.stale_after,
        db_error=report.db_error,
        leader=report.leader,
        queues=report.queues if report.leader else None,
        alerts=alerts,
    )
    _master.write_check(check)


def reload(config: Config) -> None:
    """HUP: a changed `[metrics] listen` moves (or starts, or stops) the server."""
    if _master is None:
        if config.metrics.listen is not None:
            start(config, _close_fds)
        return
    _master.stale_after = stale_after(config)
    _master.db_limit = db_limit(config.supervisor.check_interval)
    if config.metrics.listen != _master.listen and _database is None:
        _master.stop_server()
        _master.listen = config.metrics.listen
        _master.failures, _master.next_start = 0, 0.0
        if _master.listen is not None:
            _master.start_server(time.monotonic())


def shutdown() -> None:
    """Last thing the master does: stop the server, remove the directory."""
    global _directory, _master
    if _master is not None:
        _master.stop_server(wait=True)
        _master = None
    if _directory is not None and _database is None:  # the supervisor's, not a master's
        shutil.rmtree(_directory, ignore_errors=True)
        os.environ.pop(DIR_ENV, None)
        _directory = None


def directory() -> str | None:
    """This daemon's metrics directory (None while off)."""
    return _directory
