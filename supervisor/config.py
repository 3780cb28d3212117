"""The TOML configuration: declared once, typed, frozen, every problem reported at once.

A named file that is missing is fatal; without `-c` the built-in defaults run one
pool named "default" on `sqlite:///forkq.db`. `FORKQ_DATABASE_URL` overrides the
URL so passwords stay out of the file; `FORKQ_SMTP_PASSWORD` is the only source of
the SMTP password.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from supervisor.dburl import DEFAULT_URL, DatabaseURL, parse_database_url
from supervisor.durations import format_duration, parse_duration
from supervisor.errors import ConfigError
from supervisor.policy import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_SNOOZES,
)

ON_SUCCESS_MODES = ("delete", "archive", "keep")
MAX_SESSION_TIMEOUT = 31_536_000  # a year: the most wait_timeout takes
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
    on_success: str = "delete"
    retention: float = 7 * 86400.0
    claim_batch: int = 20  # jobs claimed per transaction

    def __post_init__(self) -> None:
        if self.max_workers == 0:  # the one place this default is decided
            object.__setattr__(self, "max_workers", self.workers)


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
    `limit_key` has its own bucket. How claims keep it: supervisor/store/limits.py.
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


@dataclass(frozen=True)
class MetricsConfig:
    """`[metrics]`: each daemon serves /metrics and /healthz (supervisor/observe)."""

    listen: str | None = None  # HOST:PORT ([v6]:PORT); None: no metrics server


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

    def pool(self, name: str) -> PoolConfig | None:
        return next((p for p in self.pools if p.name == name), None)


# --- field checkers: each returns the converted value or raises ValueError -----------------


def _int(minimum: int = 0) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        return value

    return check


def _seconds(minimum: float = 0.0) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        seconds = parse_duration(value)
        if seconds < minimum:
            raise ValueError(f"must be at least {minimum:g} seconds, got {value!r}")
        return seconds

    return check


def _session_timeout(value: Any) -> float:
    """0 (the server's default) or whole seconds up to a year (MariaDB's wait_timeout range)."""
    seconds = _seconds(0)(value)
    if seconds and not 1 <= seconds <= MAX_SESSION_TIMEOUT:
        raise ValueError(
            f"must be 0 (the server's default) or 1 to {MAX_SESSION_TIMEOUT} seconds, got {value!r}"
        )
    if seconds != int(seconds):
        raise ValueError(f"must be whole seconds (the server counts in seconds), got {value!r}")
    return seconds


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _name(value: Any) -> str:
    text = _str(value)
    if not text or len(text) > 64:
        raise ValueError("expected a name of 1 to 64 characters")
    return text


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return tuple(value)


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}; got {value!r}")
        return str(value)

    return check


def _table(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a table, got {value!r}")
    return value


def _json_table(value: Any) -> dict[str, Any]:
    table = _table(value)
    try:
        json.dumps(table, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"must be JSON-encodable (no TOML dates or times, nan or inf): {exc}"
        ) from exc
    return table


def _url(value: Any) -> DatabaseURL:
    try:
        return parse_database_url(_str(value))
    except ConfigError as exc:
        raise ValueError(str(exc)) from exc


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` as (host, port); ValueError says what is wrong."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isascii() or not port.isdigit():
        raise ValueError(f"expected HOST:PORT such as 127.0.0.1:8740, got {text!r}")
    if not 0 < int(port) < 65536:
        raise ValueError(f"the port must be 1 to 65535, got {port}")
    return host, int(port)


def _listen(value: Any) -> str:
    parse_listen(_str(value))
    return str(value)


def _argv(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a non-empty list of strings, got {value!r}")
    if not value[0] or any("\0" in v for v in value):
        raise ValueError("the program must be named and no argument may hold a NUL")
    return tuple(value)


def _environment(value: Any) -> dict[str, str]:
    """Variables for a command: string to string, names exec accepts, none of forkq's own."""
    table = _table(value)
    for key, text in table.items():
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"{key!r} is not a variable name")
        if key.upper().startswith("FORKQ_"):
            raise ValueError(f"{key}: FORKQ_* names are forkq's own (FORKQ_JOB_ID, ...)")
        if not isinstance(text, str) or "\0" in text:
            raise ValueError(f"{key}: expected a string without NUL, got {text!r}")
    return table


def _env_names(value: Any) -> tuple[str, ...]:
    names = _str_list(value)
    for name in names:
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"{name!r} is not a variable name")
        if name.upper().startswith("FORKQ_"):
            raise ValueError(f"{name}: FORKQ_* variables (the daemon's secrets) are never passed")
    return names


_WEB_FIELDS: dict[str, Callable[[Any], Any]] = {"listen": _listen, "read_only": _bool}
_METRICS_FIELDS: dict[str, Callable[[Any], Any]] = {"listen": _listen}
_COMMAND_FIELDS: dict[str, Callable[[Any], Any]] = {
    "argv": _argv,
    "queue": _name,
    "timeout": _seconds(0.1),
    "max_attempts": _int(1),
    "backoff_base": _seconds(0),
    "backoff_cap": _seconds(0),
    "max_snoozes": _int(0),
    "env": _environment,
    "pass_env": _env_names,
}
_SUPERVISOR_FIELDS: dict[str, Callable[[Any], Any]] = {
    "handlers": _str_list,
    "check_interval": _seconds(0.1),
    "shutdown_timeout": _seconds(0),
    "poll_interval": _seconds(0.005),
    "heartbeat_interval": _seconds(0.1),
    "process_stale_after": _seconds(1),
    "chores_lease": _seconds(1),
    "db_session_timeout": _session_timeout,
}
_POOL_FIELDS: dict[str, Callable[[Any], Any]] = {
    "workers": _int(0),
    "max_workers": _int(0),
    "timeout": _seconds(0.1),
    "max_jobs_per_child": _int(1),
    "max_child_lifetime": _seconds(1),
    "memory_limit_mb": _int(16),
    "on_success": _one_of(ON_SUCCESS_MODES),
    "retention": _seconds(0),
    "claim_batch": _int(1),
}
_RULE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "max_ready": _int(0),
    "max_age": _seconds(0),
    "max_dead": _int(0),
    "saturated_ticks": _int(1),
}
_ALERT_FIELDS: dict[str, Callable[[Any], Any]] = {
    "webhook_url": _str,
    "email_to": _str_list,
    "email_from": _str,
    "smtp_host": _str,
    "smtp_port": _int(1),
    "smtp_starttls": _bool,
    "smtp_user": _str,
    "smtp_timeout": _seconds(0.1),
    "webhook_timeout": _seconds(0.1),
    "cooldown": _seconds(0),
}
_SCHEDULE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "cron": _str,
    "handler": _name,
    "timezone": _str,
    "queue": _name,
    "payload": _json_table,
    "priority": _int(-(2**31)),
    "misfire": _one_of(MISFIRE_MODES),
}


class _Problems:
    """Collects every problem so the operator fixes the file in one pass."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str] = []

    def add(self, key: str, problem: str) -> None:
        self.items.append(f"{self.source}: {key}: {problem}")

    def fields(
        self, prefix: str, table: Any, spec: Mapping[str, Callable[[Any], Any]]
    ) -> dict[str, Any]:
        """Check one table against its field spec; unknown keys and bad values are problems."""
        if not isinstance(table, dict):
            self.add(prefix, f"expected a table, got {table!r}")
            return {}
        values: dict[str, Any] = {}
        for key, raw in table.items():
            if key not in spec:
                self.add(f"{prefix}.{key}", f"unknown key (expected one of: {', '.join(spec)})")
                continue
            try:
                values[key] = spec[key](raw)
            except ValueError as exc:
                self.add(f"{prefix}.{key}", str(exc))
        return values

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError("\n".join(self.items))


def load_config(path: str | os.PathLike[str] | None, database_url: str | None = None) -> Config:
    """Read, check and freeze the config; `database_url` (from --database) wins over everything."""
    source = str(path) if path else "<defaults>"
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"{source}: file not found") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: cannot read: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    return build_config(raw, source, database_url)


def build_config(raw: Mapping[str, Any], source: str, database_url: str | None = None) -> Config:
    problems = _Problems(source)
    known = (
        "database", "supervisor", "pools", "alerts", "schedules", "web", "commands", "metrics",
        "limits",
    )  # fmt: skip
    for key in raw:
        if key not in known:
            problems.add(key, f"unknown section (expected one of: {', '.join(known)})")
    database = _database(raw.get("database", {}), database_url, problems)
    supervisor = _supervisor(raw.get("supervisor", {}), problems)
    pools = _pools(raw.get("pools"), problems)
    alerts = _alerts(raw.get("alerts", {}), problems)
    schedules = _schedules(raw.get("schedules", {}), problems)
    web = WebConfig(**problems.fields("web", raw.get("web", {}), _WEB_FIELDS))
    commands = _commands(raw.get("commands", {}), problems)
    metrics = _metrics(raw.get("metrics", {}), problems)
    limits = _limits(raw.get("limits", {}), problems)
    problems.raise_if_any()
    assert database is not None
    return Config(
        database,
        supervisor,
        pools,
        alerts,
        schedules,
        source,
        web=web,
        commands=commands,
        metrics=metrics,
        limits=limits,
    )


def _supervisor(table: Any, problems: _Problems) -> SupervisorConfig:
    values = problems.fields("supervisor", table, _SUPERVISOR_FIELDS)
    return SupervisorConfig(**values)


def _database(table: Any, override: str | None, problems: _Problems) -> DatabaseURL | None:
    values = problems.fields("database", table, {"url": _str})
    env = os.environ.get("FORKQ_DATABASE_URL")
    url, origin = (
        (override, "--database")
        if override
        else (env, "FORKQ_DATABASE_URL")
        if env
        else (values.get("url", DEFAULT_URL), "database.url")
    )
    try:
        return parse_database_url(url)
    except ConfigError as exc:
        problems.add(origin, str(exc))
        return None


def _pools(table: Any, problems: _Problems) -> tuple[PoolConfig, ...]:
    if table is None:
        return (PoolConfig(name="default"),)
    if not isinstance(table, dict) or not table:
        problems.add("pools", "expected at least one [pools.NAME] table")
        return ()
    pools = []
    for name, body in table.items():
        values = problems.fields(f"pools.{name}", body, _POOL_FIELDS)
        workers = values.get("workers", PoolConfig.workers)
        if values.get("max_workers", workers) < workers:
            problems.add(f"pools.{name}.max_workers", f"must be at least workers ({workers})")
        if not name or len(name) > 64:
            problems.add(f"pools.{name}", "a pool (queue) name has 1 to 64 characters")
        pools.append(PoolConfig(name=name, **values))
    return tuple(pools)


def _alerts(table: Any, problems: _Problems) -> AlertsConfig:
    if not isinstance(table, dict):
        problems.add("alerts", f"expected a table, got {table!r}")
        return AlertsConfig()
    body = {k: v for k, v in table.items() if k not in ("rules", "defaults")}
    if "smtp_password" in body:
        problems.add("alerts.smtp_password", "never in the file: set FORKQ_SMTP_PASSWORD instead")
        body.pop("smtp_password")
    values = problems.fields("alerts", body, _ALERT_FIELDS)
    defaults = AlertRule(
        **problems.fields("alerts.defaults", table.get("defaults", {}), _RULE_FIELDS)
    )
    rules_table = table.get("rules", {})
    rules: dict[str, AlertRule] = {}
    if isinstance(rules_table, dict):
        for queue, rule in rules_table.items():
            merged = {
                **_rule_dict(defaults),
                **problems.fields(f"alerts.rules.{queue}", rule, _RULE_FIELDS),
            }
            rules[queue] = AlertRule(**merged)
    else:
        problems.add("alerts.rules", "expected a table of [alerts.rules.QUEUE] tables")
    url = values.get("webhook_url", "")
    if url and not url.startswith(("http://", "https://")):
        problems.add("alerts.webhook_url", "expected an http:// or https:// URL")
    password = os.environ.get("FORKQ_SMTP_PASSWORD", "")
    return AlertsConfig(**values, smtp_password=password, defaults=defaults, rules=rules)


def _commands(table: Any, problems: _Problems) -> tuple[CommandConfig, ...]:
    if not isinstance(table, dict):
        problems.add("commands", 'expected [commands."NAME"] tables')
        return ()
    commands = []
    for name, body in table.items():
        key = f"commands.{json.dumps(name)}"
        values = problems.fields(key, body, _COMMAND_FIELDS)
        if not name or len(name) > 191:
            problems.add(key, "a handler name has 1 to 191 characters")
        if "argv" not in values:
            if isinstance(body, dict) and "argv" not in body:
                problems.add(f"{key}.argv", "required")
            continue
        missing = _not_executable(values["argv"][0], values.get("env", {}))
        if missing:
            problems.add(f"{key}.argv", missing)
            continue
        commands.append(CommandConfig(name=name, **values))
    return tuple(commands)


def _not_executable(program: str, env: Mapping[str, str]) -> str | None:
    """Why `program` cannot be run, looked up as the command will be (its PATH), or None.

    Checked at load so a typo stops the boot (exit 78), not every job one by one.
    """
    path = env.get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(program, path=path):
        return None
    if os.sep in program:
        return f"{program!r} is not an executable file"
    return f"{program!r} is not an executable found in PATH ({path})"


def _rule_dict(rule: AlertRule) -> dict[str, Any]:
    return {k: v for k, v in vars(rule).items() if v is not None}


def _schedules(table: Any, problems: _Problems) -> tuple[ScheduleConfig, ...]:
    if not isinstance(table, dict):
        problems.add("schedules", "expected [schedules.NAME] tables")
        return ()
    schedules = []
    for name, body in table.items():
        key = f"schedules.{name}"
        values = problems.fields(key, body, _SCHEDULE_FIELDS)
        given = body if isinstance(body, dict) else {}
        for k in ("cron", "handler"):
            if k not in given:
                problems.add(f"{key}.{k}", "required")
        if "cron" not in values or "handler" not in values:
            continue  # missing (reported above) or invalid (reported by fields)
        error = _schedule_problem(values)
        if error:
            problems.add(key, error)
            continue
        schedules.append(ScheduleConfig(name=name, **values))
    return tuple(schedules)


def _schedule_problem(values: Mapping[str, Any]) -> str | None:
    """A cron expression or time zone that cannot be used, as one message."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from croniter import croniter

    if not croniter.is_valid(values["cron"]):
        return f"cron: not a valid cron expression: {values['cron']!r}"
    try:
        ZoneInfo(values.get("timezone", "UTC"))
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a tz directory, a long name
        return f"timezone: unknown time zone {values.get('timezone')!r}"
    return None


def _metrics(table: Any, problems: _Problems) -> MetricsConfig:
    values = problems.fields("metrics", table, _METRICS_FIELDS)
    if "listen" in values and importlib.util.find_spec("prometheus_client") is None:
        problems.add("metrics.listen", "needs prometheus-client: pip install 'forkq[metrics]'")
    return MetricsConfig(**values)


# --- [limits.NAME] -----------------------------------------------------------------------------

LIMIT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")
MIN_RATE_PERIOD = 1.0  # seconds: a rate is counted in tenths of its period


def _rate(value: Any) -> Rate:
    """ "N/PERIOD": "100/1m", "5/2s", "1000/h" (a bare unit is one of it)."""
    text = _str(value)
    count, sep, period = text.partition("/")
    if not sep or not count.strip().isdigit():
        raise ValueError(f'expected "N/PERIOD" such as "100/1m", got {value!r}')
    period = period.strip()
    if period[:1].isalpha():
        period = "1" + period
    seconds = parse_duration(period)
    if int(count) < 1:
        raise ValueError(f"N must be at least 1, got {value!r}")
    if seconds < MIN_RATE_PERIOD:
        raise ValueError(f"the period must be at least {MIN_RATE_PERIOD:g}s, got {value!r}")
    return Rate(int(count), seconds)


def _names(most: int) -> Callable[[Any], tuple[str, ...]]:
    def check(value: Any) -> tuple[str, ...]:
        names = _str_list(value)
        bad = [n for n in names if not n or len(n) > most]
        if bad:
            raise ValueError(f"names have 1 to {most} characters, got {bad[0]!r}")
        return tuple(dict.fromkeys(names))

    return check


_LIMIT_FIELDS: dict[str, Callable[[Any], Any]] = {
    "handlers": _names(191),
    "queues": _names(64),
    "concurrency": _int(1),
    "rate": _rate,
    "per_key": _bool,
}


def _limits(table: Any, problems: _Problems) -> tuple[LimitConfig, ...]:
    if not isinstance(table, dict):
        problems.add("limits", "expected [limits.NAME] tables")
        return ()
    limits = []
    for name, body in table.items():
        key = f"limits.{name}"
        if not name or len(name) > 64 or not set(name) <= LIMIT_NAME_CHARS:
            problems.add(key, "a limit name has 1 to 64 letters, digits and _ . : -")
            continue
        values = problems.fields(key, body, _LIMIT_FIELDS)
        given = set(body) if isinstance(body, dict) else set()
        if not given or given & set(_LIMIT_FIELDS) - set(values):
            continue  # not a table, or a bad value: reported by fields
        if not values.get("handlers") and not values.get("queues"):
            problems.add(key, "covers nothing: give it handlers and/or queues")
        elif "concurrency" not in values and "rate" not in values:
            problems.add(key, "limits nothing: give it a concurrency and/or a rate")
        else:
            limits.append(LimitConfig(name=name, **values))
    return tuple(limits)
