"""`forkq check, schema, alerts test`: whether this host's setup works, one line per check."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import closing
from dataclasses import replace

from supervisor import registry
from supervisor.cli.common import command_config, command_store, missing_database, with_same_flags
from supervisor.cli.databases import database_names
from supervisor.cli.tables import ERROR_PREFIX, plural
from supervisor.config import Config, require_runnable
from supervisor.config.model import HOME_DATABASE
from supervisor.errors import ConfigError, ExitCode, ForkqError, SchemaError, UsageError
from supervisor.escaping import for_terminal
from supervisor.proc import hostname
from supervisor.store import SCHEMA_VERSION, Store, open_store
from supervisor.store.queries import backend_queries, schema_text, upgrade_statements
from supervisor.work.command import load_handlers

CHECK_TIMEOUT = 5.0  # seconds `forkq check` waits for the database


def cmd_schema(args: argparse.Namespace) -> int:
    config = command_config(args)
    upgrade_from: int | None = args.upgrade_from
    if upgrade_from is not None and args.action != "print":
        raise UsageError("--upgrade-from goes with `schema print`")
    if args.action == "print":
        backend = config.database.backend
        if upgrade_from is None:
            sys.stdout.write(schema_text(backend))
        else:
            # Only the statements, each ending in `;`: a reviewed migration file as it is.
            for statement in upgrade_statements(backend_queries(backend), upgrade_from):
                print(f"{statement};")
        return int(ExitCode.OK)
    if not config.databases:
        with command_store(config, schema=False) as store:
            version = store.apply_schema()
        print(f"schema version {version} applied to {config.database.redacted()}")
        return int(ExitCode.OK)
    failed = []  # several databases: each in turn, one that fails named, the others done
    for name in database_names(args, config):
        url = config.url_of(name)
        try:
            with closing(open_store(url)) as store:
                version = store.apply_schema()
        except ForkqError as exc:
            failed.append(name)
            print(f"{ERROR_PREFIX}{name}: {url.redacted()}: {_one_line(exc)}", file=sys.stderr)
            continue
        print(f"schema version {version} applied to {name}: {url.redacted()}")
    if failed:
        print(f"{ERROR_PREFIX}schema not applied to {', '.join(failed)}", file=sys.stderr)
        return int(ExitCode.FAILURE)
    return int(ExitCode.OK)


def _one_line(exc: BaseException) -> str:
    return for_terminal(" ".join(str(exc).split()))


class _Checks:
    """One printed line per check; remembers what failed and whether it was the config."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args  # the commands a failure suggests take its -c and --database
        self.failed: list[str] = []
        self.config_failed = False
        self.prefix = ""  # "NAME: " while one of several databases is checked

    def ok(self, name: str, detail: str) -> None:
        print(f"ok    {name.ljust(9)} {self.prefix}{detail}")

    def fail(self, name: str, detail: str, *, config: bool = False) -> None:
        for line in with_same_flags(detail, self.args).splitlines() or [""]:
            print(f"FAIL  {name.ljust(9)} {self.prefix}{for_terminal(line)}")
        self.failed.append(f"{name} ({self.prefix[:-2]})" if self.prefix else name)
        self.config_failed = self.config_failed or config

    def skip(self, name: str, reason: str) -> None:
        print(f"skip  {name.ljust(9)} {self.prefix}{reason}")


def cmd_check(args: argparse.Namespace) -> int:
    checks = _Checks(args)
    try:
        config = command_config(args)
    except ConfigError as exc:
        checks.fail("config", str(exc), config=True)
        for name in ("handlers", "database", "schema"):
            checks.skip(name, "the config is invalid")
        return _check_result(checks)
    try:
        require_runnable(config)  # as `forkq run` refuses it
        checks.ok("config", f"{config.source}: {plural(len(config.pools), 'pool')}")
    except ConfigError as exc:
        checks.fail("config", str(exc), config=True)
    try:
        modules = load_handlers(config)
        programs = len(config.commands)  # registered too, by the file's [commands] tables
        counted = f"{', '.join(modules) or 'none'}: {len(registry.names()) - programs} registered"
        checks.ok("handlers", counted + (f"; [commands]: {programs}" if programs else ""))
        _check_schedules(config, checks)
    except ConfigError as exc:
        checks.fail("handlers", str(exc), config=True)
    for name in database_names(args, config):  # each a forkq installation of its own
        _check_one(args, config, name, checks)
    return _check_result(checks)


def _check_one(args: argparse.Namespace, config: Config, name: str, checks: _Checks) -> None:
    """One database's lines; a check never creates the database it checks."""
    if name == HOME_DATABASE:
        missing = missing_database(args, config)
        here = config
    else:
        here = replace(config, database=config.url_of(name))
        url = here.database
        absent = url.backend == "sqlite" and url.path != ":memory:" and not os.path.exists(url.path)
        missing = f"no SQLite database at {url.redacted()}" if absent else None
    label = name if config.databases else ""
    if missing is not None:
        checks.prefix = f"{label}: " if label else ""
        checks.fail("database", missing, config=True)  # as `forkq run` refuses it: 78
        checks.skip("schema", "no database")
        checks.prefix = ""
    else:
        _check_database(here, checks, label)


def _check_schedules(config: Config, checks: _Checks) -> None:
    """A schedule whose handler nothing registers would enqueue jobs that end dead."""
    if not config.schedules:
        return
    unknown = [s for s in config.schedules if registry.get(s.handler) is None]
    for schedule in unknown:
        checks.fail(
            "schedules",
            f"{config.source}: schedules.{schedule.name}: handler {schedule.handler!r} is"
            " registered by no module of [supervisor] handlers and no [commands] table",
            config=True,
        )
    if not unknown:
        checks.ok("schedules", f"{plural(len(config.schedules), 'schedule')}, handlers registered")


def _check_database(config: Config, checks: _Checks, name: str = "") -> None:
    """`name`: with several databases, which one (said first on each of its lines)."""
    checks.prefix = f"{name}: " if name else ""
    url = config.database.redacted()
    store = open_store(config.database, timeout=CHECK_TIMEOUT)
    try:
        version = store.server_version()
        checks.ok("database", f"{url} ({version})")
        if config.database.nodes:  # a Galera cluster's, so a MySQL store
            _check_nodes(store, checks)
        if _check_schema(store, checks):
            _check_runtime_schedules(store, checks)
    except ForkqError as exc:
        checks.fail("database", f"{url}: {' '.join(str(exc).split())}")
        checks.skip("schema", "no connection to the database (above)")
    finally:
        store.close()
        checks.prefix = ""


def _check_nodes(store: Store, checks: _Checks) -> None:
    """`[database] nodes`: which Galera node takes the writes, and how the others are."""
    from supervisor.store.mysql import MySQLStore  # here: PyMySQL loads only for MySQL

    assert isinstance(store, MySQLStore)
    nodes = store.url.nodes
    writer = store.writing_through()
    states = []
    for number, node in enumerate(nodes, 1):
        if node.same_server(writer):
            states.append(f"{number}. {node.redacted()}: Synced, the writer")
            continue
        other = open_store(node, timeout=CHECK_TIMEOUT)
        assert isinstance(other, MySQLStore)
        try:
            trouble = other.node_trouble()
        except ForkqError as exc:
            trouble = " ".join(str(exc).split())
        finally:
            other.close()
        states.append(f"{number}. {node.redacted()}: {trouble or 'Synced'}")
    checks.ok("galera", "; ".join(states))


def _check_schema(store: Store, checks: _Checks) -> bool:
    """Fails as `forkq run` refuses to boot (exit 78): no tables or an older schema. A newer
    one, which a rolling upgrade applies before this host's forkq follows, runs."""
    try:
        current = store.require_latest_schema()
    except SchemaError as exc:
        checks.fail("schema", str(exc), config=True)
        return False
    if current > SCHEMA_VERSION:
        checks.ok("schema", f"version {current}, newer than this forkq's {SCHEMA_VERSION}")
    else:
        checks.ok("schema", f"version {current}")
    return True


def _check_runtime_schedules(store: Store, checks: _Checks) -> None:
    """A schedule `forkq schedule add` made, whose handler nothing here registers, would
    make a dead job at each slot (the file's are checked with the config, _check_schedules)."""
    for schedule in store.runtime_schedules():
        if registry.get(schedule.handler) is None:
            checks.fail(
                "schedules",
                f"runtime schedule {schedule.name}: handler {schedule.handler!r} is registered"
                " by no module of [supervisor] handlers and no [commands] table (`forkq schedule"
                f" remove {schedule.name}`, or register it)",
            )


def _check_result(checks: _Checks) -> int:
    if not checks.failed:
        return int(ExitCode.OK)
    failed = ", ".join(dict.fromkeys(checks.failed))  # two runtime schedules: one name
    print(f"{ERROR_PREFIX}check failed: {failed}", file=sys.stderr)
    return int(ExitCode.CONFIG if checks.config_failed else ExitCode.FAILURE)


def cmd_alerts(args: argparse.Namespace) -> int:
    config = command_config(args)
    from supervisor.cluster.alerts.channels import send_test

    results = send_test(config.alerts, hostname())
    if not results:
        raise ForkqError("no alert channel is configured: set [alerts] webhook_url or email_to")
    for result in results:
        status = "ok  " if result.ok else "FAIL"
        error = for_terminal(" ".join(result.error.split()))
        print(f"{status}  {result.channel}  {error}".rstrip())
    failed = [r.channel for r in results if not r.ok]
    if failed:
        raise ForkqError(f"test alert failed on: {', '.join(failed)}")
    return int(ExitCode.OK)
