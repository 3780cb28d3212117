"""Each section of the file checked against its field spec, and the checks across
fields (max_workers >= workers, a program that exists, a valid cron). Every problem is
collected in Problems, so one run reports them all."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from typing import Any

from supervisor.config.model import (
    MISFIRE_MODES,
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
    cron_problem,
    read_address,
    read_addresses,
    read_argv,
    read_bool,
    read_env_names,
    read_environment,
    read_int,
    read_json_table,
    read_listen,
    read_name,
    read_names,
    read_one_of,
    read_rate,
    read_seconds,
    read_session_timeout,
    read_str,
    read_str_list,
    read_webhook_url,
    read_weights,
)
from supervisor.dburl import DEFAULT_URL, DatabaseURL, parse_database_url, with_nodes
from supervisor.errors import ConfigError
from supervisor.kinds import OnSuccess

WEB_FIELDS: dict[str, Callable[[Any], Any]] = {
    "listen": read_listen,
    "read_only": read_bool,
    "trusted_proxy": read_address,
}
_METRICS_FIELDS: dict[str, Callable[[Any], Any]] = {"listen": read_listen}
_COMMAND_FIELDS: dict[str, Callable[[Any], Any]] = {
    "argv": read_argv,
    "queue": read_name,
    "timeout": read_seconds(0.1),
    "max_attempts": read_int(1),
    "backoff_base": read_seconds(0),
    "backoff_cap": read_seconds(0),
    "max_snoozes": read_int(0),
    "keep_result": read_bool,
    "env": read_environment,
    "pass_env": read_env_names,
}
_SUPERVISOR_FIELDS: dict[str, Callable[[Any], Any]] = {
    "handlers": read_str_list,
    "check_interval": read_seconds(0.1),
    "shutdown_timeout": read_seconds(0),
    "poll_interval": read_seconds(0.005),
    "heartbeat_interval": read_seconds(0.1),
    "process_stale_after": read_seconds(1),
    "chores_lease": read_seconds(1),
    "db_session_timeout": read_session_timeout,
}
MOST_WORKERS = 1024  # a pool's processes on one host: more is a typo that forks the host dry
_POOL_FIELDS: dict[str, Callable[[Any], Any]] = {
    "workers": read_int(0, MOST_WORKERS),
    "max_workers": read_int(0, MOST_WORKERS),
    "timeout": read_seconds(0.1),
    "max_jobs_per_child": read_int(1),
    "max_child_lifetime": read_seconds(1),
    "memory_limit_mb": read_int(16),
    "on_success": lambda v: OnSuccess(read_one_of(tuple(OnSuccess))(v)),
    "retention": read_seconds(0),
    "claim_batch": read_int(1),
    "fair": read_bool,
    "weights": read_weights,
    "keep_result": read_bool,
    "result_retention": read_seconds(1),
}
_RULE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "max_ready": read_int(0),
    "max_age": read_seconds(0),
    "max_dead": read_int(0),
    "saturated_ticks": read_int(1),
}
_ALERT_FIELDS: dict[str, Callable[[Any], Any]] = {
    "webhook_url": read_webhook_url,
    "email_to": read_addresses,
    "email_from": read_str,
    "smtp_host": read_str,
    "smtp_port": read_int(1, 65535),
    "smtp_starttls": read_bool,
    "smtp_user": read_str,
    "smtp_timeout": read_seconds(0.1),
    "webhook_timeout": read_seconds(0.1),
    "cooldown": read_seconds(0),
}
_SCHEDULE_FIELDS: dict[str, Callable[[Any], Any]] = {
    "cron": read_str,
    "handler": read_name,
    "timezone": read_str,
    "queue": read_name,
    "payload": read_json_table,
    "priority": read_int(-(2**31)),
    "misfire": read_one_of(MISFIRE_MODES),
}


class Problems:
    """Collects every problem so the operator fixes the file in one pass."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.items: list[str] = []

    def add(self, key: str, problem: str) -> None:
        outside = key.startswith("--") or key.isupper()  # an option, a variable: not the file
        where = "" if outside else f"{self.source}: "
        self.items.append(f"{where}{key}: {problem}")

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


def read_supervisor(table: Any, problems: Problems) -> SupervisorConfig:
    values = problems.fields("supervisor", table, _SUPERVISOR_FIELDS)
    return SupervisorConfig(**values)


def read_database(table: Any, override: str | None, problems: Problems) -> DatabaseURL | None:
    fields = {"url": read_str, "nodes": read_str_list}
    values = problems.fields("database", table, fields)
    env = os.environ.get("FORKQ_DATABASE_URL")
    url, origin = (
        (override, "--database")
        if override
        else (env, "FORKQ_DATABASE_URL")
        if env
        else (values.get("url"), "database.url")
    )
    nodes = values.get("nodes")
    try:
        if nodes is not None:
            return _cluster(nodes, url, origin)
        return parse_database_url(url or DEFAULT_URL)
    except ConfigError as exc:
        problems.add(
            "database.nodes" if nodes is not None and origin == "database.url" else origin, str(exc)
        )
        return None


def _cluster(nodes: tuple[str, ...], url: str | None, origin: str) -> DatabaseURL:
    """`[database] nodes`: a Galera cluster. `url` (if any) must be one of them; one
    given on the command line or in FORKQ_DATABASE_URL that is not one is a single
    server, used alone."""
    if origin != "database.url" and url:
        single = parse_database_url(url)
        if not any(single.same_server(parse_database_url(node)) for node in nodes):
            return single
    return with_nodes(nodes, url)


def read_pools(table: Any, problems: Problems) -> tuple[PoolConfig, ...]:
    if table is None:
        return (PoolConfig(name="default"),)
    if not isinstance(table, dict) or not table:
        problems.add("pools", "expected at least one [pools.NAME] table")
        return ()
    pools = []
    for name, body in table.items():
        values = problems.fields(f"pools.{name}", body, _POOL_FIELDS)
        workers = values.get("workers", PoolConfig.workers)
        refused = isinstance(body, dict) and "workers" in body and "workers" not in values
        if not refused and values.get("max_workers", workers) < workers:
            problems.add(f"pools.{name}.max_workers", f"must be at least workers ({workers})")
        if not name or len(name) > 64:
            problems.add(f"pools.{name}", "a pool (queue) name has 1 to 64 characters")
        # The file's table, not the read value: a bad weight is reported beside this.
        if isinstance(body, dict) and body.get("weights") and not values.get("fair"):
            problems.add(f"pools.{name}.weights", "weights are a fair pool's: add fair = true")
        pools.append(PoolConfig(name=name, **values))
    return tuple(pools)


def read_alerts(table: Any, problems: Problems) -> AlertsConfig:
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
    password = os.environ.get("FORKQ_SMTP_PASSWORD", "")
    return AlertsConfig(**values, smtp_password=password, defaults=defaults, rules=rules)


def read_commands(table: Any, problems: Problems) -> tuple[CommandConfig, ...]:
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
        commands.append(CommandConfig(name=name, **values))
    return tuple(commands)


def not_executable(program: str, env: Mapping[str, str]) -> str | None:
    """Why `program` cannot be run, looked up as the command will be (its PATH), or None."""
    path = env.get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(program, path=path):
        return None
    if os.sep in program:
        return f"{program!r} is not an executable file"
    return f"{program!r} is not an executable found in PATH ({path})"


def _rule_dict(rule: AlertRule) -> dict[str, Any]:
    return {k: v for k, v in vars(rule).items() if v is not None}


def read_schedules(table: Any, problems: Problems) -> tuple[ScheduleConfig, ...]:
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

    if error := cron_problem(values["cron"]):
        return error
    try:
        ZoneInfo(values.get("timezone", "UTC"))
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a tz directory, a long name
        return f"timezone: unknown time zone {values.get('timezone')!r}"
    return None


def read_metrics(table: Any, problems: Problems) -> MetricsConfig:
    return MetricsConfig(**problems.fields("metrics", table, _METRICS_FIELDS))


# --- [limits.NAME] -----------------------------------------------------------------------------

LIMIT_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")


_LIMIT_FIELDS: dict[str, Callable[[Any], Any]] = {
    "handlers": read_names(191),
    "queues": read_names(64),
    "concurrency": read_int(1),
    "rate": read_rate,
    "per_key": read_bool,
}


def read_limits(table: Any, problems: Problems) -> tuple[LimitConfig, ...]:
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
