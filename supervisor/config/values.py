"""Field checkers: each takes a raw TOML value and returns it converted, or raises
ValueError with what is wrong (sections.py adds the key and the file's name)."""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable
from email.utils import getaddresses
from typing import Any
from urllib.parse import urlsplit

from supervisor.config.model import Rate
from supervisor.durations import parse_duration

# A host name's labels (letters, digits, inner hyphens), dot-separated, no trailing dot.
HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")
MAX_SESSION_TIMEOUT = 31_536_000  # a year: the most wait_timeout takes
MIN_RATE_PERIOD = 1.0  # seconds: a rate is counted in tenths of its period


def read_int(minimum: int = 0, maximum: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if value < minimum:
            raise ValueError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ValueError(f"must be at most {maximum}, got {value}")
        return value

    return check


def read_seconds(minimum: float = 0.0) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        seconds = parse_duration(value)
        if seconds < minimum:
            raise ValueError(f"must be at least {minimum:g} seconds, got {value!r}")
        return seconds

    return check


def read_session_timeout(value: Any) -> float:
    """0 (the server's default) or whole seconds up to a year (MariaDB's wait_timeout range)."""
    seconds = read_seconds(0)(value)
    if seconds and not 1 <= seconds <= MAX_SESSION_TIMEOUT:
        raise ValueError(
            f"must be 0 (the server's default) or 1 to {MAX_SESSION_TIMEOUT} seconds, got {value!r}"
        )
    if seconds != int(seconds):
        raise ValueError(f"must be whole seconds (the server counts in seconds), got {value!r}")
    return seconds


def read_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def read_name(value: Any) -> str:
    text = read_str(value)
    if not text or len(text) > 64:
        raise ValueError("expected a name of 1 to 64 characters")
    return text


def read_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def read_str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of strings, got {value!r}")
    return tuple(value)


def read_addresses(value: Any) -> tuple[str, ...]:
    """Mail recipients: a list of strings, each holding one address or several
    ("a@x, b@y", as a To: header takes them); one with no address in it is refused."""
    addresses = read_str_list(value)
    for entry in addresses:
        found = getaddresses([entry])
        if not found or not all("@" in address for _, address in found):
            raise ValueError(
                f'expected mail addresses, e.g. ["ops@example.com", "dev@example.com"];'
                f" got {entry!r}"
            )
    return addresses


def read_one_of(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}; got {value!r}")
        return str(value)

    return check


def read_table(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a table, got {value!r}")
    return value


MAX_WEIGHT = 1000  # jobs a fair pool's tenant may take per turn, at most


def read_weights(value: Any) -> tuple[tuple[str, int], ...]:
    """A fair pool's [pools.NAME.weights]: tenant name to the jobs it takes per turn."""
    check = read_int(1)
    weights = []
    for tenant, weight in sorted(read_table(value).items()):
        try:
            weights.append((tenant, check(weight)))
        except ValueError as exc:
            raise ValueError(f"{tenant}: {exc}") from None
        if weight > MAX_WEIGHT:
            raise ValueError(f"{tenant}: at most {MAX_WEIGHT}, got {weight}")
    return tuple(weights)


def read_json_table(value: Any) -> dict[str, Any]:
    table = read_table(value)
    try:
        json.dumps(table, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"must be JSON-encodable (no TOML dates or times, nan or inf): {exc}"
        ) from exc
    return table


def parse_listen(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` as (host, port); ValueError says what is wrong."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isascii() or not port.isdigit():
        raise ValueError(f"expected HOST:PORT such as 127.0.0.1:8740, got {text!r}")
    if not _is_ip(host) and (not HOST_NAME.fullmatch(host) or host.replace(".", "").isdigit()):
        # A space, a trailing dot, 256.1.1.1: refused here, never once the server starts
        raise ValueError(f"expected an IP address or a host name, got {host!r}")
    if not 0 < int(port) < 65536:
        raise ValueError(f"the port must be 1 to 65535, got {port}")
    return host, int(port)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def read_listen(value: Any) -> str:
    parse_listen(read_str(value))
    return str(value)


def read_address(value: Any) -> str:
    """An IP address as the server sees a peer's (`::1`, not `[::1]` or `0:0::1`)."""
    text = read_str(value).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise ValueError(f"expected an IP address such as 127.0.0.1, got {value!r}") from None


def read_argv(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a non-empty list of strings, got {value!r}")
    if not value[0] or any("\0" in v for v in value):
        raise ValueError("the program must be named and no argument may hold a NUL")
    return tuple(value)


def read_environment(value: Any) -> dict[str, str]:
    """Variables for a command: string to string, names exec accepts, none of forkq's own."""
    table = read_table(value)
    for key, text in table.items():
        if not key or "=" in key or "\0" in key:
            raise ValueError(f"{key!r} is not a variable name")
        if key.upper().startswith("FORKQ_"):
            raise ValueError(f"{key}: FORKQ_* names are forkq's own (FORKQ_JOB_ID, ...)")
        if not isinstance(text, str) or "\0" in text:
            raise ValueError(f"{key}: expected a string without NUL, got {text!r}")
    return table


def read_env_names(value: Any) -> tuple[str, ...]:
    names = read_str_list(value)
    for name in names:
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"{name!r} is not a variable name")
        if name.upper().startswith("FORKQ_"):
            raise ValueError(f"{name}: FORKQ_* variables (the daemon's secrets) are never passed")
    return names


def read_rate(value: Any) -> Rate:
    """ "N/PERIOD": "100/1m", "5/2s", "1000/h" (a bare unit is one of it)."""
    text = read_str(value)
    count, sep, period = text.partition("/")
    if not sep or not count.strip().isdigit():
        raise ValueError(f'expected "N/PERIOD" such as "100/1m", got {value!r}')
    period = period.strip()
    if period[:1].isalpha():
        period = "1" + period
    seconds = parse_duration(period)
    if int(count) < 1:
        raise ValueError(f"N must be at least 1, got {value!r}")
    if seconds < MIN_RATE_PERIOD:
        raise ValueError(f"the period must be at least {MIN_RATE_PERIOD:g}s, got {value!r}")
    return Rate(int(count), seconds)


def read_names(most: int) -> Callable[[Any], tuple[str, ...]]:
    def check(value: Any) -> tuple[str, ...]:
        names = read_str_list(value)
        bad = [n for n in names if not n or len(n) > most]
        if bad:
            raise ValueError(f"names have 1 to {most} characters, got {bad[0]!r}")
        return tuple(dict.fromkeys(names))

    return check


def read_webhook_url(value: Any) -> str:
    """A chat webhook: http(s), its credential in its path or query (Slack's, Mattermost's),
    never a user and password before the host, which the sender would not send."""
    url = read_str(value)
    if url and not url.startswith(("http://", "https://")):
        raise ValueError("expected an http:// or https:// URL")
    if "@" in urlsplit(url).netloc:
        raise ValueError(
            "a user or password before the host is not sent: put the token in the path"
        )
    return url


def cron_problem(cron: str) -> str | None:
    """Why a schedule's cron expression cannot be used, or None: croniter's syntax (five
    fields, a sixth for seconds, or an `@` name such as @hourly)."""
    from croniter import croniter  # only when a config has schedules

    if not croniter.is_valid(cron):
        return f"cron: not a valid cron expression: {cron!r}"
    return None
