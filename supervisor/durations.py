"""Duration strings such as "15m" or "7d", parsed once at config load."""

from __future__ import annotations

import math
import re

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")


def parse_duration(value: object) -> float:
    """Seconds from an int/float (already seconds) or a string like "90s", "5m", "7d"."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value!r}")
        return _finite(float(value), value)
    if isinstance(value, str):
        match = _PATTERN.match(value)
        if match:
            return _finite(float(match.group(1)) * _UNITS[match.group(2) or "s"], value)
    raise ValueError(f'expected a duration such as 30, "90s", "15m", "7d"; got {value!r}')


def _finite(seconds: float, value: object) -> float:
    """nan, inf and digit strings past 1e308 are not durations (nan even passes `< 0`)."""
    if not math.isfinite(seconds):
        raise ValueError(f"a duration must be a finite number of seconds, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """A short human form for messages: 45s, 12m, 3h, 2d."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return (
                f"{seconds / size:.0f}{unit}"
                if seconds % size == 0
                else f"{seconds / size:.1f}{unit}"
            )
    return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds * 1000:.0f}ms"
