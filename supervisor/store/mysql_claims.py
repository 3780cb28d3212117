"""A claim's rows as MySQL sends them: every number of a row in one column.

PyMySQL reads a result column by column in Python (a few calls and a conversion each),
about a microsecond a column, so the seven numbers of a claimed row cost more than the
rest of its claim. claim_select and claim_select_limited send them as one text column,
`numbers`: id, priority, attempts, max_attempts, batch_id, run_at and enqueued_at (epoch
seconds, as exact decimals), space-separated, '-' for NULL. They are read here with one
split, into the row claimed_job and the limits' claims read. Every other statement's
rows are read as PyMySQL gives them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PACKED_CLAIMS = frozenset({"claim_select", "claim_select_limited"})


def claim_rows(rows: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The rows of a packed claim statement, each as the named columns it stands for."""
    return [claim_row(*row) for row in rows]


def claim_row(
    numbers: str | bytes, handler: Any, payload: Any, unique_key: Any, *more: Any
) -> dict[str, Any]:
    if isinstance(numbers, bytes):  # (a server that sent it as binary: never seen)
        numbers = numbers.decode("ascii")
    key, priority, attempts, most, batch, run_at, enqueued_at = numbers.split(" ")
    row = {
        "id": int(key),
        "priority": int(priority),
        "attempts": int(attempts),
        "max_attempts": None if most == "-" else int(most),
        "batch_id": None if batch == "-" else int(batch),
        "run_at_s": None if run_at == "-" else float(run_at),
        "enqueued_at_s": None if enqueued_at == "-" else float(enqueued_at),
        "handler": handler,
        "payload": payload,
        "unique_key": unique_key,
    }
    if more:  # claim_select_limited's: the bucket key
        row["limit_key"] = more[0]
    return row
