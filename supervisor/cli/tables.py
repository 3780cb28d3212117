"""Plain-text tables and JSON for the command line (no dependency for what print does)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from supervisor.escaping import for_terminal

PROG = "forkq"
ERROR_PREFIX = f"{PROG}: error: "
WARNING_PREFIX = f"{PROG}: warning: "


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2, sort_keys=True, default=str))


class AtLeast(int):
    """A count that stopped at its cap: the true figure is this or more, printed "10000+"."""

    def __str__(self) -> str:
        return f"{int(self)}+"


CELL_MOST = 10_000  # characters of a value shown (a 15 MB payload filled the terminal)


def cell(value: Any) -> str:
    """A value as table text: one line, control characters as escapes (rows may hold any),
    cut past CELL_MOST characters (`--json` prints it whole)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    text = str(value)
    if len(text) > CELL_MOST:
        cut = f"… ({len(text):,} characters in all: --json prints it whole)"
        return for_terminal(text[:CELL_MOST]) + cut
    return for_terminal(text)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Aligned plain text: numbers right-aligned, everything else left-aligned."""
    cells = [list(headers)] + [[cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(is_number(row[i]) for row in rows) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            text.rjust(width) if right else text.ljust(width)
            for text, width, right in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def first_line(text: str | None, limit: int = 60) -> str | None:
    if not text:
        return None
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
