"""forkq's store on Django's own connection: the SQL dialect of a Django database, and
the Queue that enqueues on it. Nothing here opens a connection of its own."""

from __future__ import annotations

import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from supervisor.dburl import DatabaseURL
from supervisor.queue import Queue
from supervisor.store import Store, open_store

_QUEUES: dict[DatabaseURL, tuple[Queue, Any]] = {}


def store_for(connection: Any) -> Store:
    """forkq's store for a Django connection: its SQL dialect. It never opens a connection
    of its own here: every call the backend makes passes Django's."""
    return queue_for(connection)[0].store


def usable_connection(connection: Any) -> None:
    """Open Django's connection, first replacing one the server dropped (`wait_timeout`):
    Django's cursors run the CONN_HEALTH_CHECKS ping once a request, and forkq's statements
    on the raw `connection.connection` go around them."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()


def queue_for(connection: Any) -> tuple[Queue, Any]:
    """forkq's Queue for a Django connection (waking no daemon itself), and the nudger that
    wakes the local daemons serving that database (None when waking is off)."""
    url = database_url(connection)
    found = _QUEUES.get(url)
    if found is None:
        store = open_store(url)
        found = _QUEUES[url] = (Queue(store=store, wake=False), Queue(store=store).nudger)
    return found


def database_url(connection: Any) -> DatabaseURL:
    """Django's DATABASES entry as forkq's URL (no password: it never connects with it)."""
    params = connection.settings_dict
    if connection.vendor == "sqlite":
        return DatabaseURL(backend="sqlite", path=str(params["NAME"]))
    if connection.vendor != "mysql":
        raise ImproperlyConfigured(
            f"forkq runs on MySQL/MariaDB or SQLite; database {connection.alias!r} is"
            f" {connection.vendor}"
        )
    if not _driver_is_pymysql():
        raise ImproperlyConfigured(
            "forkq enqueues on Django's own MySQL connection through PyMySQL: call"
            " `import pymysql; pymysql.install_as_MySQLdb()` before Django loads its MySQL"
            " backend (at the top of settings.py), or use forkq's Queue on a connection of"
            " its own"
        )
    host = str(params.get("HOST") or "localhost")
    socket = host if host.startswith("/") else ""
    return DatabaseURL(
        backend="mysql",
        host="localhost" if socket else host,
        port=int(params.get("PORT") or 3306),
        user=str(params.get("USER") or ""),
        database=str(params["NAME"]),
        unix_socket=socket,
    )


def _driver_is_pymysql() -> bool:
    """Whether Django's MySQL backend runs on PyMySQL (MySQLdb is PyMySQL's alias)."""
    driver = sys.modules.get("MySQLdb")
    return driver is None or getattr(driver, "__name__", "") == "pymysql"
