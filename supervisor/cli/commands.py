"""The commands that start processes: run, web, work.

Nothing in the cli modules parses arguments (parser.py does) or builds SQL: commands
call the store, the queue, the foreground worker or the daemon, and raise forkq's own
errors, which parser.main turns into exit codes. What every command shares (its config,
its store) is common.py; the other commands are in jobs.py (one job or queue at a time),
overview.py (status, locks, schedules) and checks.py (check, schema, alerts test).
"""

from __future__ import annotations

import argparse
import os

from supervisor import logs, masking, registry
from supervisor.cli.common import command_config
from supervisor.config import Config, require_runnable
from supervisor.config.model import HOME_DATABASE
from supervisor.errors import ConfigError, UsageError, install_hint
from supervisor.kinds import Role
from supervisor.proc import set_title
from supervisor.work.command import load_handlers

# --- commands: the daemon and the foreground worker --------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    config = command_config(args)
    require_runnable(config)
    masking.remember(config)  # out of what handlers write: their children inherit it
    logs.route_stdlib()  # a library's log records as lines of ours
    # Imported here first so a broken module's error names the config file; the
    # daemon's own import of them before it forks is then a no-op.
    load_handlers(config)
    registry.log_unrunnable(config, logs.get(role=Role.MASTER))
    path = args.config or os.environ.get("FORKQ_CONFIG") or None
    if getattr(args, "only_database", None) is not None:
        raise UsageError("forkq run serves every database of its config: no --database NAME")
    from supervisor.daemon.master import run_daemon  # the daemon's modules load only for the daemon

    if config.databases:  # a master per database, under one supervisor
        from supervisor.daemon.federation import run_federation

        return run_federation(config, path, run_daemon)
    return run_daemon(config, path)


def cmd_web(args: argparse.Namespace) -> int:
    """The dashboard (supervisor/web, the `forkq[web]` extra), imported only for this command."""
    config = command_config(args)
    if getattr(args, "only_database", None) is not None:  # it would be silently ignored
        raise UsageError("forkq web shows every database of its config (?db=NAME picks one)")
    set_title("forkq: web")  # never its command line in `ps`: a --database URL's password
    try:
        from supervisor.web.server import serve
    except ImportError as exc:
        raise ConfigError(f"forkq web needs the web extra ({exc}): {install_hint('web')}") from exc
    return serve(config, args.listen, args.read_only)


def cmd_work(args: argparse.Namespace) -> int:
    config = command_config(args)
    require_runnable(config, metrics=False)  # it serves no metrics
    masking.remember(config)  # out of what handlers write
    logs.route_stdlib()
    if config.databases:
        config = one_database(config, args.queues, getattr(args, "only_database", None))
    from supervisor.work.foreground import run_foreground

    return run_foreground(config, args.queues, args.max_jobs, args.burst)


def one_database(config: Config, queues: list[str] | None, picked: str | None) -> Config:
    """`forkq work` with several databases: the one its queues live in (or the one
    `--database NAME` picks: its pools), as its own config."""
    names = queues or [p.name for p in config.pools if picked in (None, config.database_of(p.name))]
    homes = sorted({config.database_of(q) for q in names} | ({picked} if picked else set()))
    if len(homes) > 1:
        raise UsageError(
            f"these queues are in {' and '.join(homes)}: a worker claims from one database,"
            " run one `forkq work --queues ...` per database"
        )
    load_handlers(config)  # a schedule without a queue goes where its handler's queue is
    return config.for_database(homes[0] if homes else HOME_DATABASE, registry.queue_of)
