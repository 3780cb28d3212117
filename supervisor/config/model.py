"""The config's shape: one frozen dataclass per section, defaults decided once.

What each field may hold is checked in values.py and sections.py; these classes only
carry the result, so code that holds a Config never re-checks it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from supervisor.dburl import DatabaseURL
from supervisor.durations import format_duration
from supervisor.kinds import OnSuccess
from supervisor.policy import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_SNOOZES,
)

MISFIRE_MODES = ("once", "skip")


@dataclass(frozen=True)
class PoolConfig:
    name: str  # the queue this pool works
    workers: int = 2
    max_workers: int = 0  # 0: the same as workers, a static pool (resolved below)
    timeout: float = 60.0
    max_jobs_per_child: int = 1000
    max_child_lifetime: float = 3600.0
    memory_limit_mb: int = 512
    on_success: OnSuccess = OnSuccess.DELETE
    retention: float = 7 * 86400.0
    claim_batch: int = 100  # jobs claimed per transaction at most (while jobs are quick)
    fair: bool = False  # tenants (group_key, else limit_key) take turns: store/limits/fair.py
    weights: tuple[tuple[str, int], ...] = ()  # a fair pool's tenants' jobs per turn; else 1
    keep_result: bool = False  # every handler's return value is kept (store/results.py)
    result_retention: float = 0.0  # seconds results are kept; 0: `retention` (resolved below)

    def __post_init__(self) -> None:
        if self.max_workers == 0:  # the one place this default is decided
            object.__setattr__(self, "max_workers", self.workers)
        if self.result_retention == 0:
            object.__setattr__(self, "result_retention", self.retention)


@dataclass(frozen=True)
class SupervisorConfig:
    handlers: tuple[str, ...] = ("handlers",)
    check_interval: float = 10.0
    shutdown_timeout: float = 30.0
    poll_interval: float = 0.05  # per-host poll for ready jobs while children are idle
    heartbeat_interval: float = 5.0
    process_stale_after: float = 60.0  # a process row not beaten for this long is dead
    # Lease on cluster-wide chores (reaping, pruning, alerts); 0: three check intervals
    # (at least 1 s), so a leader that dies is replaced within seconds (resolved below).
    chores_lease: float = 0.0
    # MySQL/MariaDB: the server ends a daemon session idle this long (wait_timeout), so a
    # vanished host's sessions close in minutes, not the default 8 hours; 0 = server's.
    db_session_timeout: float = 600.0

    def __post_init__(self) -> None:
        if self.chores_lease == 0:  # the one place this default is decided
            object.__setattr__(self, "chores_lease", max(1.0, 3 * self.check_interval))


@dataclass(frozen=True)
class AlertRule:
    max_ready: int | None = None
    max_age: float | None = None
    max_dead: int | None = None
    saturated_ticks: int | None = None  # pool at max_workers for this many ticks


@dataclass(frozen=True)
class AlertsConfig:
    webhook_url: str = ""
    email_to: tuple[str, ...] = ()
    email_from: str = ""
    smtp_host: str = "127.0.0.1"
    smtp_port: int = 25
    smtp_starttls: bool = False
    smtp_user: str = ""
    smtp_password: str = field(default="", repr=False)  # only from FORKQ_SMTP_PASSWORD
    smtp_timeout: float = 5.0
    webhook_timeout: float = 3.0
    cooldown: float = 900.0
    defaults: AlertRule = AlertRule()
    rules: Mapping[str, AlertRule] = field(default_factory=dict)


@dataclass(frozen=True)
class ScheduleConfig:
    name: str
    cron: str
    handler: str
    timezone: str = "UTC"
    queue: str | None = None  # None: the handler's registered queue, as with enqueue
    payload: Mapping[str, Any] = field(default_factory=dict)
    priority: int = 0
    misfire: str = "once"
    # Set on a schedule added at runtime (forkq_schedules): slots before `since` never run
    # (it moves on resume). None on the config file's, which start at the daemon's boot.
    since: float | None = None
    paused: bool = False
    changed_by: str | None = None


@dataclass(frozen=True)
class CommandConfig:
    """`[commands."NAME"]`: a program run per job instead of a Python function.

    What the program gets and how its exit status is read: supervisor/work/command.py.
    """

    name: str  # the handler name jobs carry
    argv: tuple[str, ...]
    queue: str = "default"
    timeout: float | None = None  # None: the pool's
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff_base: float = DEFAULT_BACKOFF_BASE
    backoff_cap: float = DEFAULT_BACKOFF_CAP
    max_snoozes: int = DEFAULT_MAX_SNOOZES  # exit 75 + forkq-snooze: before the job is dead
    keep_result: bool = False  # a last stdout line `forkq-result: JSON` is kept
    env: Mapping[str, str] = field(default_factory=dict)  # besides PATH, LANG and FORKQ_*
    pass_env: tuple[str, ...] = ()  # the daemon's own variables it gets, when they are set


@dataclass(frozen=True)
class Rate:
    """A limit's `rate = "N/PERIOD"`: at most `count` jobs started per `period` seconds."""

    count: int
    period: float

    def __str__(self) -> str:
        return f"{self.count}/{format_duration(self.period)}"


@dataclass(frozen=True)
class LimitConfig:
    """`[limits.NAME]`: flow control across every host (SPEC "Flow control").

    It covers the jobs of `handlers` and every job of `queues`; `concurrency` caps how
    many of them run at once, `rate` how many start per period; with `per_key`, each
    `limit_key` has its own bucket. How claims keep it: supervisor/store/limits/claims.py.
    """

    name: str
    handlers: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    concurrency: int | None = None
    rate: Rate | None = None
    per_key: bool = False


@dataclass(frozen=True)
class WebConfig:
    """`forkq web`: the dashboard. Its token comes only from FORKQ_WEB_TOKEN."""

    listen: str = "127.0.0.1:8740"  # HOST:PORT ([v6]:PORT); not loopback needs the token
    read_only: bool = False  # refuse every action (403) and hide the buttons
    trusted_proxy: str | None = None  # the https proxy's address: its X-Forwarded-* count


@dataclass(frozen=True)
class MetricsConfig:
    """`[metrics]`: each daemon serves /metrics and /healthz (supervisor/observe)."""

    listen: str | None = None  # HOST:PORT ([v6]:PORT); None: no metrics server


HOME_DATABASE = "default"  # the name `[database]` goes by in labels, status and alerts


@dataclass(frozen=True)
class NamedDatabase:
    """`[databases.NAME]`: a database of its own holding `queues` (config/databases.py)."""

    name: str
    url: DatabaseURL
    queues: tuple[str, ...]


@dataclass(frozen=True)
class Config:
    database: DatabaseURL
    supervisor: SupervisorConfig = SupervisorConfig()
    pools: tuple[PoolConfig, ...] = (PoolConfig(name="default"),)
    alerts: AlertsConfig = AlertsConfig()
    schedules: tuple[ScheduleConfig, ...] = ()
    source: str = "<defaults>"
    web: WebConfig = WebConfig()
    commands: tuple[CommandConfig, ...] = ()
    metrics: MetricsConfig = MetricsConfig()
    limits: tuple[LimitConfig, ...] = ()
    databases: tuple[NamedDatabase, ...] = ()  # besides [database]; () for most users
    # Set on a config narrowed by for_database(): the database it is (HOME_DATABASE else).
    database_name: str = HOME_DATABASE

    def pool(self, name: str) -> PoolConfig | None:
        return next((p for p in self.pools if p.name == name), None)

    def database_of(self, queue: str) -> str:
        """The name of the database holding `queue` (HOME_DATABASE: `[database]`)."""
        return next((d.name for d in self.databases if queue in d.queues), HOME_DATABASE)

    def url_of(self, name: str) -> DatabaseURL:
        """The URL of the database called `name` (KeyError: no such database)."""
        if name == HOME_DATABASE:
            return self.database
        for named in self.databases:
            if named.name == name:
                return named.url
        raise KeyError(name)

    def url_for_queue(self, queue: str) -> DatabaseURL:
        return self.url_of(self.database_of(queue))

    def every_database(self) -> tuple[tuple[str, DatabaseURL], ...]:
        """(name, url) of every database, the home one first."""
        return ((HOME_DATABASE, self.database), *((d.name, d.url) for d in self.databases))

    def for_database(
        self, name: str, queue_of_handler: Callable[[str], str] | None = None
    ) -> Config:
        """This config as one database's own installation: its URL as `database`, the pools,
        limits and schedules of its queues, no `databases`. A schedule without a queue
        goes where its handler's registered queue lives (`queue_of_handler`; the home
        database when it is not given). Limits by handler only are kept in each database:
        each keeps its own count."""

        def here(queue: str) -> bool:
            return self.database_of(queue) == name

        def schedule_here(s: ScheduleConfig) -> bool:
            if s.queue is not None:
                return here(s.queue)
            if queue_of_handler is None:
                return name == HOME_DATABASE
            return here(queue_of_handler(s.handler))

        return replace(
            self,
            database=self.url_of(name),
            pools=tuple(p for p in self.pools if here(p.name)),
            schedules=tuple(s for s in self.schedules if schedule_here(s)),
            limits=tuple(
                lim for lim in self.limits if not lim.queues or all(here(q) for q in lim.queues)
            ),
            databases=(),
            database_name=name,
        )

    @property
    def from_file(self) -> bool:
        """Read from a file (-c, FORKQ_CONFIG): its pools and handlers are the daemon's,
        not the built-in defaults' single pool."""
        return self.source != "<defaults>"
