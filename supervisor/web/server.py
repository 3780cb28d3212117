"""`forkq web`: the dashboard served by waitress, a production WSGI server.

Without FORKQ_WEB_TOKEN the dashboard listens on loopback only: a non-loopback `listen`
is refused before anything binds, with one line and exit 78 (a config error).
"""

from __future__ import annotations

import os
import socket
from typing import Any

from supervisor import events, logs
from supervisor.config import Config, parse_listen
from supervisor.errors import ConfigError, ForkqError
from supervisor.web.app import make_app_from_config
from supervisor.web.security import TOKEN_ENV, check_token, is_loopback_host

THREADS = 4  # requests served at once (each thread keeps one database connection)


def listen_address(listen: str, token: str | None) -> tuple[str, int]:
    """(host, port) to bind; ConfigError for a bad address or a non-loopback one untokened."""
    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        raise ConfigError(f"--listen: {exc}") from None
    if token is None and not _only_loopback(host):
        raise ConfigError(
            f"refusing to listen on {listen} without {TOKEN_ENV}: set a token, or listen on"
            " 127.0.0.1 (the default) and reach it through an SSH tunnel or a proxy"
        )
    return host, port


def _only_loopback(host: str) -> bool:
    """A literal loopback address or `localhost`; a name must resolve to loopback only."""
    if is_loopback_host(host):
        return True
    try:
        infos = socket.getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(is_loopback_host(str(info[4][0])) for info in infos)


def proxy_options(trusted_proxy: str | None) -> dict[str, Any]:
    """waitress's options for `[web] trusted_proxy`: from that address (only), its
    X-Forwarded-Proto sets the scheme (https: the session cookie is Secure) and its
    X-Forwarded-For the client's address (logged with each action). Every other client's
    X-Forwarded-* headers are dropped before the app sees them."""
    if trusted_proxy is None:
        return {}
    return {
        "trusted_proxy": trusted_proxy,
        "trusted_proxy_count": 1,
        "trusted_proxy_headers": {"x-forwarded-proto", "x-forwarded-for"},
    }


def serve(config: Config, listen: str | None = None, read_only: bool | None = None) -> int:
    """Run the dashboard until interrupted. `listen` and `read_only` override `[web]`."""
    from waitress.server import create_server

    token = check_token(os.environ.get(TOKEN_ENV))
    address = listen or config.web.listen
    host, port = listen_address(address, token)
    read_only = bool(read_only) or config.web.read_only  # --read-only only ever adds it
    app = make_app_from_config(config, read_only=read_only, token=token)
    try:
        server = create_server(
            app,
            host=host,
            port=port,
            threads=THREADS,
            ident="forkq",
            clear_untrusted_proxy_headers=True,
            **proxy_options(config.web.trusted_proxy),
        )
    except OSError as exc:  # a runtime state (the port is taken), not a defect of ours
        raise ForkqError(
            f"cannot listen on {address}: {exc.strerror or exc} (another forkq web, or"
            " another server, has it?): stop it, or choose --listen / [web] listen"
        ) from exc
    shown = f"[{host}]" if ":" in host else host
    logs.get(component="web").info(
        events.WEB_LISTENING,
        url=f"http://{shown}:{port}/",
        read_only=read_only,
        auth="token" if token else "none (loopback only)",
        trusted_proxy=config.web.trusted_proxy,
        database=config.database.redacted(),
    )
    try:
        server.run()
    finally:
        server.close()
    return 0
