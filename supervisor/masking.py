"""The daemon's own secrets kept out of what a handler writes.

A handler's error or a command's stderr goes into the job's last_error, its attempt
history, its `job_finished` log line, `forkq show` and the dashboard; each line a
command prints is a `command_output` log line. A handler that
quotes the connection URL or the password it was given (a failed connect, a dumped
settings object) would put the daemon's secret there for anyone who reads jobs. So
that text has each secret the daemon knows replaced with `***`: the
password of each database of its config (decoded, and as written in a URL), the SMTP
password and the webhook URL (a chat webhook's URL is its credential). Not a value
shorter than SHORTEST or a password equal to its user name: those would mask words.

The master remembers them at launch and on every reload (`remember`); its children
inherit what it knows. A value once known stays masked: an error may quote an old one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from supervisor.config import Config

MASK = "***"
SHORTEST = 4  # a shorter value would mask ordinary words in every error

_known: tuple[str, ...] = ()  # longest first: a secret inside another is masked whole


def secrets_of(config: Config) -> set[str]:
    """What of `config` must never be shown, in each form it may be written in."""
    # A password that is its user's name is no secret: the redacted URL shows the user.
    found = {url.password for _, url in config.every_database() if url.password != url.user}
    found |= {quote(value, safe="") for value in found} | {quote(value) for value in found}
    found |= {config.alerts.smtp_password, config.alerts.webhook_url}
    return {value for value in found if len(value) >= SHORTEST}


def remember(config: Config) -> None:
    global _known
    _known = _longest_first({*_known, *secrets_of(config)})


def masked(text: str) -> str:
    """`text` with every remembered secret replaced by `***`."""
    for secret in _known:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def _longest_first(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(values, key=lambda value: (-len(value), value)))
