"""Database URLs: `mysql://user:pass@host:3306/db` and `sqlite:///path.db` (SQLAlchemy style)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from .errors import ConfigError

DEFAULT_URL = "sqlite:///forkq.db"
MYSQL_SCHEMES = ("mysql", "mysql+pymysql", "mariadb", "mariadb+pymysql")


@dataclass(frozen=True)
class DatabaseURL:
    backend: str  # "mysql" or "sqlite"
    path: str = ""  # sqlite file
    host: str = "127.0.0.1"
    port: int = 3306
    user: str = ""
    password: str = field(default="", repr=False)
    database: str = ""
    unix_socket: str = ""

    def is_local(self) -> bool:
        """Loopback or a unix socket: traffic that never leaves this host."""
        return bool(self.unix_socket) or self.host in ("127.0.0.1", "::1", "localhost")

    def redacted(self) -> str:
        """The URL for logs and status output: the password never appears."""
        if self.backend == "sqlite":
            return f"sqlite:///{self.path}"
        auth = f"{self.user}:***@" if self.password else (f"{self.user}@" if self.user else "")
        return f"mysql://{auth}{self.host}:{self.port}/{self.database}"

    def __str__(self) -> str:
        return self.redacted()


def parse_database_url(url: str) -> DatabaseURL:
    """Parse and check a URL; a ConfigError names what is wrong (never the password)."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(
            "database url must look like mysql://user:pass@host:3306/db or sqlite:///path.db"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite":
        path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else ""
        if not path:
            raise ConfigError(
                "sqlite url needs a path: sqlite:///relative.db or sqlite:////absolute.db"
            )
        return DatabaseURL(backend="sqlite", path=path)
    if scheme not in MYSQL_SCHEMES:
        raise ConfigError(f"unsupported database scheme {scheme!r}: use mysql:// or sqlite:///")
    parts = urlsplit(url)
    try:
        port = parts.port or 3306
    except ValueError as exc:
        raise ConfigError("database url has an invalid port") from exc
    database = parts.path.lstrip("/")
    if not database:
        raise ConfigError("mysql url needs a database name: mysql://user:pass@host:3306/DBNAME")
    query = parse_qs(parts.query)
    return DatabaseURL(
        backend="mysql",
        host=parts.hostname or "127.0.0.1",
        port=port,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        database=unquote(database),
        unix_socket=query.get("unix_socket", [""])[0],
    )
