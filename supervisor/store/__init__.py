"""Open the store for a database URL."""

from __future__ import annotations

from collections.abc import Sequence

from supervisor.dburl import DatabaseURL, parse_database_url, with_nodes
from supervisor.store.base import Store
from supervisor.store.core import PROMOTE_BATCH, SCHEDULE_AHEAD, SCHEMA_VERSION
from supervisor.store.queries import SQL_DIR, backend_queries, schema_text

__all__ = [
    "PROMOTE_BATCH",
    "SCHEDULE_AHEAD",
    "SCHEMA_VERSION",
    "SQL_DIR",
    "Store",
    "backend_queries",
    "open_store",
    "schema_text",
]


def open_store(
    url: DatabaseURL | str | Sequence[str],
    *,
    timeout: float = 60.0,
    session_timeout: float | None = None,
) -> Store:
    """A store for `url`; nothing connects until the first query (so it is safe to fork after).

    `session_timeout` (MySQL/MariaDB): the server ends this store's session after that
    many idle seconds (the daemon's sessions: `[supervisor] db_session_timeout`); None
    keeps the server's default, as producers do. SQLite has no sessions to end.
    A list of mysql:// URLs is a Galera cluster's nodes (`[database] nodes`).
    """
    if isinstance(url, DatabaseURL):
        parsed = url
    else:
        parsed = parse_database_url(url) if isinstance(url, str) else with_nodes(url)
    if parsed.backend == "sqlite":
        from supervisor.store.sqlite import SQLiteStore

        return SQLiteStore(parsed, busy_timeout=timeout)
    from supervisor.store.mysql import MySQLStore

    return MySQLStore(
        parsed,
        connect_timeout=min(5.0, timeout),
        read_timeout=timeout,
        session_timeout=session_timeout,
    )
