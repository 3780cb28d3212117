"""What every `forkq` sub-command shares, and the commands that start processes.

Nothing in the cli modules parses arguments (parser.py does) or builds SQL: commands
call the store, the queue, the foreground worker or the daemon, and raise forkq's own
errors, which parser.main turns into exit codes. The commands themselves are here (run,
web, work), in jobs.py (one job or queue at a time), overview.py (status, locks,
schedules) and checks.py (check, schema, alerts test).
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from supervisor import events, logs, registry
from supervisor.config import Config, load_config
from supervisor.errors import ConfigError, ForkqError, install_hint
from supervisor.kinds import Role
from supervisor.status import STATUS_CAP as STATUS_CAP  # parser.py's --exact help names it
from supervisor.store import Store, open_store
from supervisor.work.command import load_handlers

# Commands that may create an SQLite file (SPEC), or never open one (`alerts test`), or
# report a missing one as a failed check (`check`). Every other command refuses a missing
# file: `forkq status` in the wrong directory must not leave a new empty database there.
_MAY_CREATE = ("run", "work", "schema", "alerts", "check")


def _config(args: argparse.Namespace) -> Config:
    """-c FILE, else $FORKQ_CONFIG, else the built-in defaults; a named missing file is fatal."""
    path = args.config or os.environ.get("FORKQ_CONFIG") or None
    config = load_config(path, args.database)
    if getattr(args, "command", None) not in _MAY_CREATE:
        missing = missing_database(args, config)
        if missing is not None:
            raise ForkqError(missing)
    return config


def missing_database(args: argparse.Namespace, config: Config) -> str | None:
    """What to say when the config names an SQLite file that does not exist, else None."""
    url = config.database
    if url.backend != "sqlite" or url.path == ":memory:" or os.path.exists(url.path):
        return None
    return (
        f"no SQLite database at {os.path.abspath(url.path)} ({url.redacted()}, from"
        f" {_database_origin(args)}): fix the URL, or create the database with"
        " `forkq schema apply`"
    )


def _database_origin(args: argparse.Namespace) -> str:
    """Where the database URL came from, in the order load_config weighs them."""
    if args.database:
        return "--database"
    if os.environ.get("FORKQ_DATABASE_URL"):
        return "FORKQ_DATABASE_URL"
    path = args.config or os.environ.get("FORKQ_CONFIG")
    flag = "-c" if args.config else "FORKQ_CONFIG"
    if path and "url" in _database_table(path):
        return f"[database] url of {path} ({flag})"
    return "the default: no --database, FORKQ_DATABASE_URL or [database] url in a config"


def _database_table(path: str) -> dict[str, Any]:
    """The config file's [database] table (load_config read it a moment ago)."""
    with open(path, "rb") as file:
        table = tomllib.load(file).get("database", {})
    return table if isinstance(table, dict) else {}


@contextmanager
def _store(config: Config, *, schema: bool = True) -> Iterator[Store]:
    """The store, closed afterwards; with `schema`, refuse a missing or old schema first."""
    store = open_store(config.database)
    try:
        if schema:
            store.require_schema()
        yield store
    finally:
        store.close()


def _status_cap(args: argparse.Namespace) -> int | None:
    """Where `forkq status` stops counting: STATUS_CAP, or nowhere with --exact. Read here,
    beside the STATUS_CAP that parser.py's --exact help names, so the two are one value."""
    return None if args.exact else STATUS_CAP


# --- commands: the daemon and the foreground worker --------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    config = _config(args)
    # Imported here first so a broken module's error names the config file; the
    # daemon's own import of them before it forks is then a no-op.
    load_handlers(config)
    log = logs.get(role=Role.MASTER)
    for handler in registry.unserved(config):  # its jobs would wait for ever: say so at boot
        log.warning(events.HANDLER_QUEUE_UNSERVED, handler=handler.name, queue=handler.queue)
    from supervisor.daemon.master import run_daemon  # the daemon's modules load only for the daemon

    return run_daemon(config, args.config or os.environ.get("FORKQ_CONFIG") or None)


def cmd_web(args: argparse.Namespace) -> int:
    """The dashboard (supervisor/web, the `forkq[web]` extra), imported only for this command."""
    config = _config(args)
    try:
        from supervisor.web.server import serve
    except ImportError as exc:
        raise ConfigError(f"forkq web needs the web extra ({exc}): {install_hint('web')}") from exc
    return serve(config, args.listen, args.read_only)


def cmd_work(args: argparse.Namespace) -> int:
    config = _config(args)
    from supervisor.work.foreground import run_foreground

    return run_foreground(config, args.queues, args.max_jobs, args.burst)
