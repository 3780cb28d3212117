"""A stored column's value as forkq reads it, whatever another program wrote there.

SQLite takes any type in any column: a producer's raw INSERT may put '' (an empty form
field) in `max_attempts`, 'high' in `priority`, a word of its own in `status`. Reading
such a row must fail no reader (the claim, the master settling what a child held, the
CLI, the dashboard): the value reads as a default, and the row carries why
(JobRow.unreadable), so the worker ends the job dead with that reason.
"""

from __future__ import annotations

from typing import Any


def whole(row: dict[str, Any], column: str, default: Any, odd: list[str]) -> Any:
    """An integer column as an int (None stays None): `default`, and the reason in `odd`,
    for what is none."""
    value = row[column]
    if value is None or type(value) is int:  # nearly always: no conversion
        return value
    try:
        return int(value)  # MySQL's Decimal of an expression, a whole float
    except (TypeError, ValueError, OverflowError):
        odd.append(f"{column} holds {value!r}, not a whole number")
        return default


def as_text(value: Any) -> Any:
    """A BLOB a raw INSERT bound (bytes: a driver's bytes, SQLite keeps them so) as the
    text it holds; bytes that are no UTF-8 read as surrogates, which text_problem names."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def text_problem(column: str, value: Any) -> str | None:
    """Why a text column is no text (bytes a raw INSERT wrote that are no UTF-8, read as
    surrogates: SQLite only), or None. ASCII, nearly every value, is one quick test."""
    if not isinstance(value, str) or value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"{column} is not valid UTF-8 text"
    return None


def not_text(row: dict[str, Any]) -> list[str]:
    """The payload or handler of `row` that is no UTF-8 text, said (text_problem)."""
    columns = ("payload", "handler")
    return [p for c in columns if (p := text_problem(c, as_text(row[c]))) is not None]
