"""The TOML configuration: declared once, typed, frozen, every problem reported at once.

A named file that is missing is fatal; without `-c` the built-in defaults run one
pool named "default" on `sqlite:///forkq.db`. `FORKQ_DATABASE_URL` overrides the
URL so passwords stay out of the file; `FORKQ_SMTP_PASSWORD` is the only source of
the SMTP password.

model.py holds the frozen dataclasses, values.py the field checkers, sections.py the
per-section parsers; this module reads the file, builds the Config and is the one name
the rest of forkq imports from.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from supervisor.config.databases import check_distinct, check_limits, read_databases
from supervisor.config.model import (
    HOME_DATABASE,
    MISFIRE_MODES,
    AlertRule,
    AlertsConfig,
    CommandConfig,
    Config,
    LimitConfig,
    MetricsConfig,
    NamedDatabase,
    PoolConfig,
    Rate,
    ScheduleConfig,
    SupervisorConfig,
    WebConfig,
)
from supervisor.config.sections import (
    LIMIT_NAME_CHARS,
    WEB_FIELDS,
    Problems,
    not_executable,
    read_alerts,
    read_commands,
    read_database,
    read_limits,
    read_metrics,
    read_pools,
    read_schedules,
    read_supervisor,
)
from supervisor.config.values import MAX_SESSION_TIMEOUT, MIN_RATE_PERIOD, parse_listen
from supervisor.errors import ConfigError, install_hint

__all__ = [
    "HOME_DATABASE",
    "LIMIT_NAME_CHARS",
    "MAX_SESSION_TIMEOUT",
    "MIN_RATE_PERIOD",
    "MISFIRE_MODES",
    "AlertRule",
    "AlertsConfig",
    "CommandConfig",
    "Config",
    "LimitConfig",
    "MetricsConfig",
    "NamedDatabase",
    "PoolConfig",
    "Rate",
    "ScheduleConfig",
    "SupervisorConfig",
    "WebConfig",
    "build_config",
    "load_config",
    "parse_listen",
    "require_runnable",
    "schedule_from",
]


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


def require_runnable(config: Config, *, metrics: bool = True) -> None:
    """What this host needs to run `config`'s work, every problem at once (ConfigError,
    exit 78, before anything forks): each `[commands]` program executable, so a typo stops
    the boot and not every job one by one; with `metrics`, the daemon's, prometheus-client
    for `[metrics] listen`. Only `forkq run`, its reload, `forkq work` and `forkq check`
    ask: producers, the CLI and the dashboard read the same file on hosts without them (a
    deploy half done, php being reinstalled, no metrics extra)."""
    problems = Problems(config.source)
    serves_metrics = metrics and config.metrics.listen is not None
    if serves_metrics and importlib.util.find_spec("prometheus_client") is None:
        problems.add("metrics.listen", f"needs prometheus-client: {install_hint('metrics')}")
    for command in config.commands:
        if why := not_executable(command.argv[0], command.env):
            problems.add(f"commands.{json.dumps(command.name)}.argv", why)
    problems.raise_if_any()


def build_config(raw: Mapping[str, Any], source: str, database_url: str | None = None) -> Config:
    problems = Problems(source)
    known = (
        "database", "supervisor", "pools", "alerts", "schedules", "web", "commands", "metrics",
        "limits", "databases",
    )  # fmt: skip
    for key in raw:
        if key not in known:
            problems.add(key, f"unknown section (expected one of: {', '.join(known)})")
    database = read_database(raw.get("database", {}), database_url, problems)
    supervisor = read_supervisor(raw.get("supervisor", {}), problems)
    pools = read_pools(raw.get("pools"), problems)
    alerts = read_alerts(raw.get("alerts", {}), problems)
    schedules = read_schedules(raw.get("schedules", {}), problems)
    web = WebConfig(**problems.fields("web", raw.get("web", {}), WEB_FIELDS))
    commands = read_commands(raw.get("commands", {}), problems)
    metrics = read_metrics(raw.get("metrics", {}), problems)
    limits = read_limits(raw.get("limits", {}), problems)
    databases: tuple[NamedDatabase, ...] = ()
    if "databases" in raw:
        databases = read_databases(raw["databases"], problems)
        check_limits(databases, limits, problems)
        check_distinct(database, databases, problems)
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
        databases=databases,
    )


def schedule_from(name: str, fields: Mapping[str, Any]) -> ScheduleConfig:
    """A schedule given at runtime (`forkq schedule add`, the dashboard), checked as a
    `[schedules.NAME]` table is; ConfigError lists every problem."""
    problems = Problems("the new schedule")
    found = read_schedules({name: {k: v for k, v in fields.items() if v is not None}}, problems)
    if len(name) > 64 or not name:
        problems.add(name, "expected a name of 1 to 64 characters")
    problems.raise_if_any()
    return found[0]
