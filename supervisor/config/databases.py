"""`[databases.NAME]`: queues that live in a database of their own (issue 24, item 2).

    [databases.reports]
    url = "mysql://forkq@db4/reports"     # or nodes = [...], a Galera cluster
    queues = ["reports", "pdf"]           # FORKQ_DATABASE_URL_REPORTS overrides url

Each is a whole forkq installation; every queue not listed stays in `[database]` (named
"default" in labels). Read and checked here: a queue in two databases, an entry without
queues or URL, a database named "default", and a `[limits]` entry whose queues span two
databases are config errors (exit 78). `Config.for_database()` gives each database's own
config; who serves which: the daemon forks a master per database.
"""

from __future__ import annotations

import os
import re
from typing import Any, Protocol

from supervisor.config.model import HOME_DATABASE, LimitConfig, NamedDatabase
from supervisor.config.values import read_str, read_str_list
from supervisor.dburl import DatabaseURL, parse_database_url, with_nodes
from supervisor.errors import ConfigError

FIELDS = {"url": read_str, "nodes": read_str_list, "queues": read_str_list}
HOME = "[database]"
NAME = re.compile(r"[A-Za-z0-9_]{1,64}")


class Problems(Protocol):
    def add(self, key: str, problem: str) -> None: ...

    def fields(self, prefix: str, table: Any, spec: Any) -> dict[str, Any]: ...


def read_databases(table: Any, problems: Problems) -> tuple[NamedDatabase, ...]:
    if not isinstance(table, dict):
        problems.add("databases", "expected [databases.NAME] tables")
        return ()
    found: list[NamedDatabase] = []
    holder: dict[str, str] = {}  # queue -> the database that lists it
    for name, entry in table.items():
        key = f"databases.{name}"
        if not NAME.fullmatch(name):
            problems.add(key, "expected a name of letters, digits and _ (it labels metrics)")
            continue
        if name == HOME_DATABASE:
            problems.add(key, f"{HOME_DATABASE!r} is the name of [database]: choose another")
            continue
        if not isinstance(entry, dict):  # said without its value: it may hold a password
            problems.add(key, "expected a table: [databases.NAME] with url (or nodes), queues")
            continue
        values = problems.fields(key, entry, FIELDS)
        queues = values.get("queues", ())
        if not queues:
            problems.add(f"{key}.queues", "expected the queues this database holds (one or more)")
        for queue in queues:
            if queue in holder:
                problems.add(
                    f"{key}.queues", f"queue {queue!r} is in databases.{holder[queue]} too"
                )
            holder.setdefault(queue, name)
        env = f"FORKQ_DATABASE_URL_{name.upper()}"  # a password stays out of the file
        if os.environ.get(env):
            values["url"] = os.environ[env]
        url = _url(values, key, problems)
        if url is not None and queues:
            found.append(NamedDatabase(name, url, tuple(queues)))
    return tuple(found)


def _url(values: dict[str, Any], key: str, problems: Problems) -> DatabaseURL | None:
    nodes, url = values.get("nodes"), values.get("url")
    try:
        if nodes is not None:
            return with_nodes(nodes, url)
        if url is None:
            problems.add(f"{key}.url", "expected url = ... (or nodes = [...], a Galera cluster)")
            return None
        return parse_database_url(url)
    except ConfigError as exc:
        problems.add(f"{key}.{'nodes' if nodes is not None else 'url'}", str(exc))
        return None


def database_of(databases: tuple[NamedDatabase, ...], queue: str) -> str:
    """The name of the database holding `queue` (HOME: `[database]`)."""
    return next((d.name for d in databases if queue in d.queues), HOME)


def check_limits(
    databases: tuple[NamedDatabase, ...], limits: tuple[LimitConfig, ...], problems: Problems
) -> None:
    """A limit is kept by claims in one database: its queues must all be there."""
    for limit in limits:
        homes = sorted({database_of(databases, q) for q in limit.queues})
        if len(homes) > 1:
            problems.add(
                f"limits.{limit.name}.queues",
                f"its queues are in {' and '.join(homes)}: a limit covers queues of one database",
            )


def check_distinct(
    home: DatabaseURL | None, databases: tuple[NamedDatabase, ...], problems: Problems
) -> None:
    """Two names for one database would list, count and claim every job twice."""
    seen: list[tuple[str, DatabaseURL]] = [] if home is None else [(HOME, home)]
    for named in databases:
        for place, url in seen:
            if _same_database(url, named.url):
                problems.add(f"databases.{named.name}", f"it is the database of {place} too")
                break
        seen.append((f"databases.{named.name}", named.url))


def _same_database(a: DatabaseURL, b: DatabaseURL) -> bool:
    if a.backend != b.backend:
        return False
    if a.backend == "sqlite":
        return os.path.realpath(a.path) == os.path.realpath(b.path)
    servers = {(n.host.lower(), n.port, n.unix_socket) for n in (a.nodes or (a,))}
    other = {(n.host.lower(), n.port, n.unix_socket) for n in (b.nodes or (b,))}
    return a.database == b.database and bool(servers & other)
