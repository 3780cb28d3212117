"""Where the wake sockets live, and what names a database there (see the package's
docstring)."""

from __future__ import annotations

import hashlib
import os
import tempfile

from supervisor.dburl import DatabaseURL

ENV_RUNTIME_DIR = "FORKQ_RUNTIME_DIR"
ENV_WAKE = "FORKQ_WAKE"
SYSTEM_RUNTIME_DIR = "/run/forkq"
SOCKET_SUFFIX = ".sock"

MAX_DATAGRAM = 4096  # bytes read per datagram; the kernel drops the rest of a longer one
MAX_DATAGRAMS_PER_DRAIN = 64  # the rest wait for the next loop turn (select says readable)
MAX_NAMES_PER_DRAIN = 256
MAX_NAME_BYTES = 256  # a queue name has at most 64 characters, 4 bytes each in UTF-8
MAX_SOCKETS = 16  # masters per database per host a producer sends to
RELIST_AFTER = 1.0  # seconds a producer reuses its list of sockets before listing again


def enabled() -> bool:
    """False when `FORKQ_WAKE` is 0/false/no/off: no datagram sent, no socket bound."""
    return os.environ.get(ENV_WAKE, "1").strip().lower() not in ("0", "false", "no", "off")


# --- where the sockets live ----------------------------------------------------------------


def database_identity(url: DatabaseURL) -> str:
    """What names one database on this host: no user, no password."""
    if url.backend == "sqlite":
        return "sqlite:" + os.path.realpath(url.path)
    if url.is_local():
        return f"mysql:local/{url.database}"
    return f"mysql:{url.host.lower()}:{url.port}/{url.database}"


def store_identity(store: object) -> str | None:
    """The identity of a store's database, or None when it cannot be told (never raises)."""
    try:
        url = getattr(store, "url", None)
        return database_identity(url) if isinstance(url, DatabaseURL) else None
    except Exception:
        return None


def database_key(identity: str) -> str:
    """The directory name for a database: a short hash, so no path or name leaks into it."""
    return hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def user_runtime_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"forkq-{os.getuid()}")


def daemon_runtime_dir() -> tuple[str, bool]:
    """Where this process would bind, and whether that is the per-user fallback."""
    override = os.environ.get(ENV_RUNTIME_DIR, "")
    if override:
        return override, False
    if os.path.isdir(SYSTEM_RUNTIME_DIR) and os.access(SYSTEM_RUNTIME_DIR, os.W_OK | os.X_OK):
        return SYSTEM_RUNTIME_DIR, False
    return user_runtime_dir(), True


def producer_dirs(identity: str, override: str) -> tuple[tuple[str, bool], ...]:
    """The socket directories a producer looks in, each with "must be owned by me"."""
    key = database_key(identity)
    if override:
        return ((os.path.join(override, key), False),)
    return (
        (os.path.join(SYSTEM_RUNTIME_DIR, key), False),
        (os.path.join(user_runtime_dir(), key), True),
    )
