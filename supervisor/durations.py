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


def format_duration(seconds: float | None) -> str:
    """7m12s, 45s, 2h05m, 3d4h, 250ms: at most two units, exact to the second (the one
    form of a duration in messages, tables, alerts and pages)."""
    raw = max(0.0, seconds or 0.0)
    if 0 < raw < 1:
        return f"{raw * 1000:.0f}ms"
    total = round(raw)
    for big, small, name_big, name_small in (
        (86400, 3600, "d", "h"),
        (3600, 60, "h", "m"),
        (60, 1, "m", "s"),
    ):
        if total >= big:
            whole, rest = divmod(total, big)
            part = rest // small
            if not part:
                return f"{whole}{name_big}"
            width = "02d" if small < 3600 else "d"
            return f"{whole}{name_big}{part:{width}}{name_small}"
    return f"{total}s"
