"""Who may see and act: the token, the session cookie, CSRF tokens and the response headers.

The model (README "Dashboard"):

* `FORKQ_WEB_TOKEN` set: every page, API and action needs it, as `Authorization: Bearer
  <token>` or through the login form, which sets a signed session cookie (HttpOnly,
  SameSite=Strict, Secure behind https). The signing key is derived from the token, so
  every process serving the same token accepts the same cookies, and a new token ends
  every session.
* No token: the server binds to loopback only (server.py), and the app answers only
  requests addressed to a loopback name, so a web page that rebinds its own DNS name to
  127.0.0.1 cannot read the dashboard through the operator's browser.
* Every action is a POST carrying the session's CSRF token, an HMAC of the session id.
  A request authenticated by the Bearer header needs none: a browser never sends that
  header across sites on its own (it would take a CORS preflight this app never grants).

Tokens, signatures and CSRF tokens are compared with hmac.compare_digest.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets
import time
import urllib.parse
from dataclasses import dataclass

from supervisor.errors import ConfigError

TOKEN_ENV = "FORKQ_WEB_TOKEN"  # noqa: S105 (the variable's name, not a token)
MIN_TOKEN_LENGTH = 16
SESSION_COOKIE = "forkq_session"
FLASH_COOKIE = "forkq_flash"
SESSION_LIFETIME = 12 * 3600  # seconds a login lasts
MOST_LOGGED_OUT = 100_000  # sessions remembered as logged out (12 h of them, a few MB)
LOOPBACK_NAMES = ("localhost", "localhost.")

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",  # dashboard.js re-reads the page it is on (live refresh)
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def check_token(token: str | None) -> str | None:
    """The token as given, None for none; ConfigError for one too short to resist guessing."""
    if token is None or token == "":
        return None
    if len(token) < MIN_TOKEN_LENGTH or token != token.strip():
        raise ConfigError(
            f"{TOKEN_ENV} must be at least {MIN_TOKEN_LENGTH} characters without surrounding"
            " spaces (e.g. the output of `openssl rand -hex 32`)"
        )
    return token


def is_loopback_host(host: str) -> bool:
    """A host name or address that only reaches this machine (no name lookup)."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def request_host_name(host_header: str) -> str:
    """The name in a Host header, without its port ([::1]:8740 -> [::1])."""
    if host_header.startswith("["):
        return host_header.split("]", 1)[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def local_target(target: str) -> str | None:
    """`target` if it is a path on this site (a redirect after login or an action), else None.

    Judged as a browser parses it: the URL standard drops tabs and newlines anywhere and
    control characters at either end, and reads a backslash as a slash, so
    `/<TAB>/evil.example/` is `//evil.example/`, another host. Any control character or
    backslash is refused, then the target must parse to a path alone: no scheme, no host.
    """
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in target) or "\\" in target:
        return None
    if not target.startswith("/") or target.startswith("//"):
        return None
    try:
        parts = urllib.parse.urlsplit(target)
    except ValueError:
        return None
    if parts.scheme or parts.netloc or not parts.path.startswith("/"):
        return None
    return target


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class Session:
    """One browser's session: a random id, when it began, whether it logged in."""

    sid: str
    issued: int
    authenticated: bool
    fresh: bool = False  # made for this request: the response sets its cookie


class Guard:
    """Checks credentials and signs what the browser keeps. One per app."""

    def __init__(self, token: str | None) -> None:
        self.token = check_token(token)
        if self.token is None:
            self.key = secrets.token_bytes(32)  # sessions last while this process does
        else:
            self.key = hmac.new(self.token.encode(), b"forkq web session", "sha256").digest()
        # Sessions logged out here: their cookies, still signed, are refused till they expire.
        self.logged_out: dict[str, int] = {}

    @property
    def required(self) -> bool:
        return self.token is not None

    # --- credentials --------------------------------------------------------------------------

    def token_matches(self, given: str) -> bool:
        """Constant time whatever the lengths: the digests are compared, not the texts."""
        if self.token is None:
            return False
        return hmac.compare_digest(_digest(given), _digest(self.token))

    def bearer(self, authorization: str | None) -> bool | None:
        """None without a Bearer header; else whether its token is right."""
        if not authorization:
            return None
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.token_matches(value.strip())

    def host_allowed(self, host_header: str) -> bool:
        """With a token any Host will do; without one only loopback names (DNS rebinding)."""
        return self.required or is_loopback_host(request_host_name(host_header))

    # --- sessions -----------------------------------------------------------------------------

    def new_session(self) -> Session:
        return Session(
            secrets.token_urlsafe(18), int(time.time()), authenticated=not self.required, fresh=True
        )

    def login(self) -> Session:
        """A new session id at login (an id set before it is never the logged-in one)."""
        return Session(secrets.token_urlsafe(18), int(time.time()), True, fresh=True)

    def log_out(self, session: Session, now: float | None = None) -> None:
        """End a session in this process (another serving the same token learns it only
        when the session expires or the token changes)."""
        oldest = (now or time.time()) - SESSION_LIFETIME
        for sid in [s for s, issued in self.logged_out.items() if issued < oldest]:
            del self.logged_out[sid]
        if len(self.logged_out) < MOST_LOGGED_OUT:
            self.logged_out[session.sid] = session.issued

    def encode(self, session: Session) -> str:
        body = f"v1.{session.sid}.{session.issued}.{int(session.authenticated)}"
        return f"{body}.{self._sign(body)}"

    def decode(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session a cookie carries, if this app signed it and it has not expired."""
        if not cookie or len(cookie) > 200:
            return None
        body, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign(body).encode()):
            return None
        parts = body.split(".")
        if len(parts) != 4 or parts[0] != "v1" or not parts[2].isdigit():
            return None
        issued = int(parts[2])
        if (now or time.time()) - issued > SESSION_LIFETIME or parts[1] in self.logged_out:
            return None
        authenticated = parts[3] == "1" or not self.required
        return Session(parts[1], issued, authenticated)

    def csrf_token(self, session: Session) -> str:
        return self._sign(f"csrf.{session.sid}")

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        expected = self.csrf_token(session)
        return hmac.compare_digest(_digest(given or ""), _digest(expected))

    # --- flash messages: one line for the next page, signed so no link can forge one ----------

    def sign_flash(self, message: str) -> str:
        body = _b64(message[:500].encode("utf-8", "replace"))
        return f"{body}.{self._sign('flash.' + body)}"

    def read_flash(self, cookie: str | None) -> str | None:
        if not cookie:
            return None
        body, _, signature = cookie.rpartition(".")
        if not hmac.compare_digest(signature.encode(), self._sign("flash." + body).encode()):
            return None
        try:
            return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None

    def _sign(self, text: str) -> str:
        return _b64(hmac.new(self.key, text.encode("utf-8", "replace"), "sha256").digest())
