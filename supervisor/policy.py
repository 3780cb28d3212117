"""Pure decisions about a job's fate: backoff delays and what a failure leads to.

No I/O; every function takes what it needs (including randomness) as arguments.
"""

from __future__ import annotations

import math
import numbers
import random

from supervisor.outcomes import Fate

DEFAULT_MAX_ATTEMPTS = 10
DEFAULT_BACKOFF_BASE = 2.0  # seconds
DEFAULT_BACKOFF_CAP = 3600.0  # seconds
# Snooze(delay) requests one job may make before it ends dead: a handler that snoozes
# by mistake every time is seen within hours, never loops forever unseen.
DEFAULT_MAX_SNOOZES = 100
# The longest wait a job may be given (a Retry or Snooze delay, a command's
# `forkq-retry-after:` or `forkq-snooze:`, a backoff): a year.
MAX_DELAY = 365 * 86400.0


def clamp_delay(seconds: float) -> float:
    """A wait as it is written: 0 to MAX_DELAY. Past a year (inf included) is a year; nan,
    or no number at all, is a year too, so neither a busy loop nor a value the store
    cannot write; below zero is now."""
    if not is_seconds(seconds) or math.isnan(seconds):
        return MAX_DELAY
    return max(0.0, min(float(seconds), MAX_DELAY))


def is_seconds(value: object) -> bool:
    """A number of seconds (nan and inf included), not a bool or a string."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def backoff_delay(
    attempt: int,
    base: float = DEFAULT_BACKOFF_BASE,
    cap: float = DEFAULT_BACKOFF_CAP,
    rng: random.Random | None = None,
) -> float:
    """Seconds before attempt `attempt + 1`: base * 2**(attempt-1), capped, with equal jitter.

    Equal jitter keeps at least half the delay (no thundering retries) and spreads the
    other half at random so a burst of failures does not come back at one instant.
    """
    exponent = max(0, attempt - 1)
    ceiling = min(cap, base * (2.0 ** min(exponent, 60)))
    draw = (rng or random).random()
    return ceiling / 2.0 + draw * ceiling / 2.0


def failure_fate(
    attempts: int,
    max_attempts: int,
    error: str,
    requested_delay: float | None = None,
    base: float = DEFAULT_BACKOFF_BASE,
    cap: float = DEFAULT_BACKOFF_CAP,
    rng: random.Random | None = None,
) -> Fate:
    """Retry with backoff while attempts are left, else dead with the last error.

    The wait is at most MAX_DELAY (clamp_delay): a requested delay past it, an epoch
    passed where seconds were meant, is cut to a year and the error says so.
    """
    if attempts >= max_attempts:
        return Fate(dead=True, delay=0.0, error=f"{error} (attempt {attempts} of {max_attempts})")
    if requested_delay is not None and not is_seconds(requested_delay):
        # set on a Retry after it was made (its constructor refuses one): the backoff
        error = f"{error} (asked to wait a {type(requested_delay).__name__}: no seconds)"
        requested_delay = None
    if requested_delay is None:
        return Fate(
            dead=False, delay=clamp_delay(backoff_delay(attempts, base, cap, rng)), error=error
        )
    delay = clamp_delay(requested_delay)
    if not requested_delay <= MAX_DELAY:  # nan too
        error = f"{error} (asked to wait {requested_delay:g}s: waits a year, the most)"
    return Fate(dead=False, delay=delay, error=error)


def truncate_error(text: str, limit: int = 4000) -> str:
    """Errors are stored in a TEXT column; keep the end, where the cause usually is. A lone
    surrogate (os.fsdecode of a name that is no UTF-8) is written as its escape, `\\udcff`:
    no driver writes it as it is."""
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else "..." + text[-(limit - 3) :]
