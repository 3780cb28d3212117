"""What every `forkq` sub-command shares: its config (-c, $FORKQ_CONFIG, --database URL
or NAME: a URL overrides `[database] url`, a name picks one of `[databases.NAME]`),
the refusal of a missing SQLite file, its store, and where `forkq status` stops counting."""

from __future__ import annotations

import argparse
import getpass
import os
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from supervisor import registry
from supervisor.cli.tables import WARNING_PREFIX
from supervisor.config import Config, load_config
from supervisor.config.databases import NAME
from supervisor.config.model import HOME_DATABASE
from supervisor.dburl import parse_database_url
from supervisor.errors import ConfigError, ForkqError, UsageError
from supervisor.escaping import for_terminal
from supervisor.proc import hostname
from supervisor.status import STATUS_CAP
from supervisor.store import Store, open_store

# Commands that may create an SQLite file (SPEC), or never open one (`alerts test`), or
# report a missing one as a failed check (`check`). Every other command refuses a missing
# file: `forkq status` in the wrong directory must not leave a new empty database there.
MAY_CREATE = ("run", "work", "schema", "alerts", "check")


def command_config(args: argparse.Namespace) -> Config:
    """-c FILE, else $FORKQ_CONFIG, else the built-in defaults; a named missing file is fatal."""
    path = args.config or os.environ.get("FORKQ_CONFIG") or None
    if path and not args.config and not os.path.exists(path):
        raise ConfigError(f"{path}: file not found (named by FORKQ_CONFIG)")
    name = _database_name(args.database)
    config = load_config(path, None if name else args.database)
    if name is not None:  # `--database NAME`: one of the config's databases
        if not config.databases and name != HOME_DATABASE:
            load_config(path, args.database)  # not a name here: refused as a URL (78)
        check_database_name(config, name)
        args.only_database = name
    if getattr(args, "command", None) not in MAY_CREATE:
        missing = missing_database(args, config)
        if missing is not None:
            raise ForkqError(missing)
    return config


def check_database_name(config: Config, name: str) -> None:
    names = [each for each, _ in config.every_database()]
    if name not in names:
        raise UsageError(f"no database named {name!r} (there are: {', '.join(names)})")


def _database_name(value: str | None) -> str | None:
    """`--database NAME` (no `://`: not a URL) picks one of the config's databases."""
    return value if value and "://" not in value and NAME.fullmatch(value) else None


def missing_database(args: argparse.Namespace, config: Config) -> str | None:
    """What to say when the config names an SQLite file that does not exist, else None."""
    url = config.database
    if url.backend != "sqlite" or url.path == ":memory:" or os.path.exists(url.path):
        return None
    return (
        f"no SQLite database at {os.path.abspath(url.path)} ({url.redacted()}, from"
        f" {database_origin(args)}): fix the URL, or create the database with"
        " `forkq schema apply`"
    )


def database_origin(args: argparse.Namespace) -> str:
    """Where the database URL came from, in the order load_config weighs them."""
    if args.database and _database_name(args.database) is None:
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
def command_store(config: Config, *, schema: bool = True) -> Iterator[Store]:
    """The store, closed afterwards; with `schema`, refuse a missing or old schema first."""
    store = open_store(config.database)
    try:
        if schema:
            store.require_schema()
        yield store
    finally:
        store.close()


def status_cap(args: argparse.Namespace) -> int | None:
    """Where `forkq status` stops counting: STATUS_CAP (the one parser.py's --exact help
    names), or nowhere with --exact."""
    return None if args.exact else STATUS_CAP


def operator_name() -> str:
    """user@host of whoever runs this command, for the last_error of what it cancels."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a bare container)
        user = f"uid {os.getuid()}"
    return f"{user}@{hostname()}"


def warn_unrunnable(config: Config, handler: str, queue: str | None, what: str) -> None:
    """Say on stderr why `what` may never run (registry.unrunnable); it is done anyway."""
    for reason in registry.unrunnable(config, handler, queue, what):
        print(f"{WARNING_PREFIX}{for_terminal(reason)}", file=sys.stderr)


_SUGGESTED = re.compile(r"`forkq ([a-z][^`]*)`")


def with_same_flags(text: str, args: argparse.Namespace | None) -> str:
    """The commands a message suggests (`forkq schema apply`) given the -c and --database
    this one was, so they reach the same database as written. A URL with a password is
    not repeated: `--database URL` then says where it goes."""
    flags = ""
    if config := getattr(args, "config", None):
        flags += f" -c {shlex.quote(config)}"
    if url := getattr(args, "database", None):
        try:
            secret = bool(parse_database_url(url).password)
        except ForkqError:
            secret = True
        flags += " --database " + ("URL" if secret else shlex.quote(url))
    return _SUGGESTED.sub(lambda m: f"`forkq {m[1]}{flags}`", text) if flags else text
