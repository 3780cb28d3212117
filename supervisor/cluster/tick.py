"""The check tick, in a short-lived process of its own: chores, schedules, alerts.

Every `check_interval` (SIGALRM) the master forks one tick. It works on a database
connection of its own with the ordinary timeouts, sends mail and webhooks, writes one
line of JSON on a pipe, and exits. Whatever the database or an SMTP or webhook server
does meanwhile, the master's loop never waits on it, so a stop or an overtime kill is
acted on at once. One tick at a time: a tick still running when the next falls due is
left alone, and one that outlives `tick_timeout` is killed.

Schedules and the cluster-wide alert rules (backlog, age, dead jobs) run only on the
host that holds the chores lease, so N app servers send one alert and enqueue each
slot once (the slot row makes that exact even across a lease hand-over). Host-local
rules (saturated pool, crash loop, database unreachable) are judged on every host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from supervisor import events, logs
from supervisor.cluster.chores import Chores
from supervisor.config import Config
from supervisor.errors import DatabaseError
from supervisor.kinds import Role
from supervisor.proc import die_with_parent, set_title
from supervisor.store import Store, open_store

# Counts no alert rule reads (scheduled, running, done) stop here on a tick: a queue of a
# million jobs waiting for tomorrow must not cost every tick ten thousand index reads.
TICK_MINOR_CAP = 100
# A tick's queries give up after this: one caught by a silent database must not hold
# the next tick's "database unreachable" alert back for a minute.
TICK_DB_TIMEOUT = 5.0


def tick_timeout(check_interval: float) -> float:
    """How long a tick may run before the master kills it: a hung SMTP server must not
    hold every later tick back, yet a slow one must get to finish."""
    return max(60.0, 3 * check_interval)


@dataclass(frozen=True)
class TickInput:
    """What the master knew when it forked the tick (inherited, never sent)."""

    host: str
    owner: str  # the master's process name: the chores lease's owner across ticks
    started_at: float  # the master's boot on the database clock: schedules start there
    clock_offset: float = 0.0  # database clock minus this host's, as last seen
    saturated_ticks: dict[str, int] = field(default_factory=dict)
    crash_looping: set[str] = field(default_factory=set)
    alert_memory: dict[str, Any] = field(default_factory=dict)  # AlertState by key
    sweep_from: int | None = None  # where the chores' sweep of dependencies goes on


@dataclass
class TickReport:
    """The one line a tick sends back to the master."""

    leader: bool = False
    db_error: str | None = None
    clock_offset: float = 0.0
    alert_memory: dict[str, Any] = field(default_factory=dict)
    paused: list[str] | None = None
    # For the metrics (supervisor/observe): the queue figures this tick read, only on the
    # chores holder (QueueStats.as_dict(); None elsewhere), and the alerts judged here as
    # [rule, queue, firing]: this host's host rules, and the queue rules on the holder.
    queues: list[dict[str, Any]] | None = None
    alerts: list[list[Any]] = field(default_factory=list)
    sweep_from: int | None = None  # the next tick's TickInput.sweep_from

    def encode(self) -> bytes:
        memory = {k: dataclasses.asdict(v) for k, v in self.alert_memory.items()}
        return (json.dumps({**vars(self), "alert_memory": memory}) + "\n").encode()

    @classmethod
    def decode(cls, line: bytes) -> TickReport:
        from supervisor.cluster.alerts.states import AlertState

        data = json.loads(line)
        memory = {k: AlertState(**v) for k, v in data.pop("alert_memory").items()}
        return cls(**data, alert_memory=memory)


def run_tick(config: Config, store: Store, given: TickInput) -> TickReport:
    """One check tick's work; database trouble is reported, never raised."""
    log = logs.get(role=Role.MASTER, component="tick")
    # The tick judges reachability on its own connection (with TICK_DB_TIMEOUT), not by the
    # master's shorter timeout: a loaded server that answers a heartbeat in a second is no
    # outage to alert about.
    report = TickReport(clock_offset=given.clock_offset, sweep_from=given.sweep_from)
    try:
        report.paused = sorted(store.paused_queues())
        chores = Chores(store, config, owner=given.owner)
        chores.sweep_from = given.sweep_from
        report.leader = chores.run().leader
        report.sweep_from = chores.sweep_from
    except DatabaseError as exc:
        report.db_error = str(exc) or type(exc).__name__
        log.warning(events.CHORES_SKIPPED, error=report.db_error[:300])
    # The database clock, so hosts with skewed clocks agree on cooldowns and slots; while
    # it cannot be read, ours corrected by the offset last seen (cooldowns were written
    # on the database clock: a host an hour behind would otherwise never send again).
    now = time.time() + report.clock_offset
    if report.db_error is None:
        with contextlib.suppress(DatabaseError):
            now = store.db_now()
            report.clock_offset = now - time.time()
    if report.leader and report.db_error is None:  # the file's and forkq_schedules' rows
        _enqueue_schedules(config, store, now, given.started_at)
    report.alert_memory = _alerts(config, store, given, report, now)
    return report


def _enqueue_schedules(config: Config, store: Store, now: float, started_at: float) -> None:
    # Two check intervals of grace: a tick delayed by a slow SMTP server or a lease
    # hand-over must not make misfire = "skip" drop a slot that is only just due.
    from supervisor.cluster.schedules import active_schedules, enqueue_due

    log = logs.get(role=Role.MASTER)
    grace = 2 * config.supervisor.check_interval
    try:
        schedules = active_schedules(config.schedules, store.runtime_schedules())
        for name, slot, job_id in enqueue_due(store, schedules, now, started_at, grace):
            when = datetime.fromtimestamp(slot, UTC).isoformat()
            log.info(events.SCHEDULE_ENQUEUED, schedule=name, slot=when, job_id=job_id)
    except DatabaseError as exc:
        log.warning(events.SCHEDULES_SKIPPED, error=str(exc))


def _alerts(
    config: Config, store: Store, given: TickInput, report: TickReport, now: float
) -> dict[str, Any]:
    from supervisor.cluster.alerts.channels import AlertRunner
    from supervisor.cluster.alerts.states import Snapshot, stats_cap

    queues = []
    if report.leader and report.db_error is None:  # only the lease holder judges queues
        try:  # counts stop just past every threshold: flat cost at any table size
            # Every pool's queue, as `forkq status` and the dashboard show them: a drained
            # queue's series read 0 in /metrics, not gone.
            served = [pool.name for pool in config.pools]
            queues = store.stats(stats_cap(config.alerts), served, TICK_MINOR_CAP)
            report.queues = [q.as_dict() for q in queues]
        except DatabaseError as exc:
            report.db_error = str(exc) or type(exc).__name__
    snapshot = Snapshot(
        host=given.host,
        queues=queues,
        saturated_ticks=given.saturated_ticks,
        crash_looping=given.crash_looping,
        db_error=report.db_error,
        cluster=report.leader,
    )
    runner = AlertRunner()
    runner.memory = dict(given.alert_memory)
    runner.run(store, config.alerts, snapshot, now)
    report.alerts = alert_labels(runner.states, given.host, report.leader)
    return runner.memory


def alert_labels(states: dict[str, Any], host: str, leader: bool) -> list[list[Any]]:
    """[rule, queue, firing] per alert key this host may speak for; queue is the queue or
    pool, "" for db_unreachable. Queue rules only on the chores holder, which judged them."""
    from supervisor.cluster.alerts.states import QUEUE_RULES, is_host_key

    labels: list[list[Any]] = []
    for key, state in sorted(states.items()):
        rule, _, rest = key.partition(":")
        if rule in QUEUE_RULES and leader:
            labels.append([rule, rest, state.firing])
        elif is_host_key(key, host):  # rule:HOST:POOL, or db_unreachable:HOST
            labels.append([rule, rest[len(host) + 1 :], state.firing])
    return labels


def tick_main(config: Config, given: TickInput, report_fd: int) -> int:
    """The tick process's body (in proc.process_frame): run the tick, write its report."""
    die_with_parent(signal.SIGKILL)
    set_title("forkq: master check")
    store = open_store(
        config.database,
        timeout=TICK_DB_TIMEOUT,
        session_timeout=config.supervisor.db_session_timeout,
    )
    report = run_tick(config, store, given)
    store.close()
    os.write(report_fd, report.encode())
    return 0


def tick_crashed(error: str) -> None:
    logs.get(role=Role.MASTER).error(events.TICK_CRASHED, error=error)
