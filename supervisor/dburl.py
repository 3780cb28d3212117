"""Database URLs: `mysql://user:pass@host:3306/db` and `sqlite:///path.db` (SQLAlchemy style)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import parse_qs, unquote

from supervisor.errors import ConfigError

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
    # A Galera cluster (`[database] nodes`): every node's URL in the order of preference,
    # this one among them; empty for a single server. See store/mysql_session.py.
    nodes: tuple[DatabaseURL, ...] = field(default=(), repr=False)

    def same_server(self, other: DatabaseURL) -> bool:
        """The same server, database and user (the password aside)."""
        return _place(self) == _place(other)

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
    userinfo, host, port, database, query = _split_mysql(url.split("://", 1)[1])
    user, _, password = userinfo.partition(":")
    return DatabaseURL(
        backend="mysql",
        host=host or "127.0.0.1",
        port=port,
        user=unquote(user),
        password=unquote(password),
        database=database,
        unix_socket=parse_qs(query).get("unix_socket", [""])[0],
    )


def with_nodes(urls: Sequence[str], url: str | None = None) -> DatabaseURL:
    """A Galera cluster's URL: `urls` its nodes in order of preference (each a mysql://
    URL naming the same database; credentials may differ), `url` one of them or None
    (the first). The store connects to the first node that answers and says it is
    Synced, and moves on when it stops answering (store/mysql_session.py)."""
    if isinstance(urls, str) or not urls:
        raise ConfigError("expected a list of mysql:// urls, one a Galera node")
    nodes = tuple(parse_database_url(each) for each in urls)
    if any(node.backend != "mysql" for node in nodes):
        raise ConfigError("every node must be a mysql:// url (a Galera node)")
    if len({node.database for node in nodes}) > 1:
        raise ConfigError("every node must name the same database")
    if len({_place(node) for node in nodes}) < len(nodes):
        raise ConfigError("a node is listed twice")
    home = nodes[0] if url is None else parse_database_url(url)
    if not any(home.same_server(node) for node in nodes):
        raise ConfigError("url must be one of nodes (or be left out: the first node)")
    return replace(nodes[0], nodes=nodes)


def _place(url: DatabaseURL) -> tuple[str, str, int, str, str, str]:
    return (url.backend, url.host, url.port, url.unix_socket, url.database, url.user)


def _split_mysql(rest: str) -> tuple[str, str, int, str, str]:
    """(userinfo, host, port, database, query) of what follows `mysql://`.

    Parsed here rather than by urlsplit, which refuses a `[` or `]` anywhere before the
    host (it takes them for an IPv6 address) and so cannot read a password holding one.
    The user part ends at the last `@` before the path: a raw `@`, `:`, `[` or `]` in a
    password is read as meant. A raw `/`, `?` or `#` ends the authority in any URL, so a
    password holding one cannot be told from a path: it must be percent-encoded.
    Messages never quote the URL: it may hold the password.
    """
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    authority, after = rest[:end], rest[end:]
    path, _, query = after.partition("?")
    # An `@` past the authority is a password's, cut short by a raw `/` or `?` (a database
    # name holding one is written %40): read on, its rest is a host and port that are not.
    if "#" in after or "@" in after:
        raise ConfigError(
            "database url: a '/', '?' or '#' in the user name or password must be"
            " percent-encoded (%2F, %3F, %23); the url must not have a #fragment"
        )
    userinfo, _, hostport = authority.rpartition("@")
    host, port = _host_port(hostport)
    database = unquote(path.lstrip("/"))
    if not database:
        raise ConfigError("mysql url needs a database name: mysql://user:pass@host:3306/DBNAME")
    return userinfo, host, port, database, query


def _host_port(text: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port`; the port defaults to 3306."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ConfigError("database url has an invalid IPv6 host: use [address]:port")
        port_text = rest[1:]
    else:
        host, _, port_text = text.partition(":")
    if not port_text:
        return host.lower(), 3306
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigError("database url has an invalid port")
    return host.lower(), int(port_text)
