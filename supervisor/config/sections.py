"""Each section of the file checked against its field spec, and the checks across
fields (max_workers >= workers, a program that exists, a valid cron). Every problem is
collected in _Problems, so one run reports them all."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from supervisor.config.model import (
    MISFIRE_MODES,
    ON_SUCCESS_MODES,
    AlertRule,
    AlertsConfig,
    CommandConfig,
    LimitConfig,
    MetricsConfig,
    PoolConfig,
    ScheduleConfig,
    SupervisorConfig,
)
from supervisor.config.values import (
    _address,
    _argv,
    _bool,
    _env_names,
    _environment,
    _int,
    _json_table,
    _listen,
    _name,
    _names,
    _one_of,
    _rate,
    _seconds,
    _session_timeout,
    _str,
    _str_list,
)
from supervisor.dburl import DEFAULT_URL, DatabaseURL, parse_database_url
from supervisor.errors import ConfigError

_WEB_FIELDS: dict[str, Callable[[Any], Any]] = {
    "listen": _listen,
    "read_only": _bool,
    "trusted_proxy": _address,
}
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
    "fair": _bool,
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
