"""What fits in one statement to a MySQL server: its max_allowed_packet.

The server refuses a longer statement by closing the connection while the client still
writes it, which looks like an outage ("server has gone away", or error 1153): a write
retried as for a lost connection would fail the same way for ever. So what may be that
long (a payload, a kept return value) is measured before it is sent, and refused with a
reason instead.
"""

from __future__ import annotations

from typing import Any

# The smallest max_allowed_packet a server accepts: a shorter statement fits any server.
MIN_PACKET = 1024


def packet_size(statement: str) -> int:
    """Bytes on the wire: the statement in UTF-8 and the command byte."""
    return len(statement.encode("utf-8")) + 1


def most_bytes(template: str, bound: dict[str, Any]) -> int:
    """The most bytes `template` with `bound` takes on the wire: a string value escaped
    (each character at most doubled) and quoted, 4 bytes a character; others are short."""
    chars = len(template) + sum(
        2 * len(value) + 2 if isinstance(value, str) else 32 for value in bound.values()
    )
    return 4 * chars + 1


def fits(statement: str, limit: int) -> bool:
    """Surely within `limit` bytes, measured only when it may not be (4 bytes a character)."""
    return len(statement) * 4 + 1 <= limit or packet_size(statement) <= limit


def too_large(what: str, size: int, limit: int, advice: str) -> str:
    return (
        f"{what} is {megabytes(size)} to send, more than the server's"
        f" max_allowed_packet ({megabytes(limit)}): {advice}, or raise max_allowed_packet"
    )


PAYLOAD_ADVICE = "keep large data out of the payload (store it elsewhere and enqueue a reference)"
RESULT_ADVICE = "keep large data out of the return value (store it elsewhere, return a reference)"


def megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"
