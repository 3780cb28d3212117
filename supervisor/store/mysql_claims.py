"""A claim's rows as MySQL sends them: every number of a row in one column.

PyMySQL reads a result column by column in Python (a few calls and a conversion each),
about a microsecond a column, so the seven numbers of a claimed row cost more than the
rest of its claim. claim_select and claim_select_limited send them as one text column,
`numbers`: id, priority, attempts, max_attempts, batch_id, run_at and enqueued_at (epoch
seconds, as exact decimals), space-separated, '-' for NULL. They are read here with one
split, into the row claimed_job and the limits' claims read; so are the head jobs of a
fair pool's tenants (fair_turn). Every other statement's rows are read as PyMySQL gives
them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

JOB_KEYS = ("id", "priority", "attempts", "max_attempts", "batch_id", "run_at_s",
            "enqueued_at_s", "handler", "payload", "unique_key", "limit_key")  # fmt: skip


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


def turn_rows(rows: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """fair_turn's rows: a tenant, whether it has a ready job, and its head job (packed as
    a claim's; every job key None when it has no head)."""
    return [turn_row(*row) for row in rows]


def turn_row(tenant: Any, any_ready: Any, numbers: Any, *job: Any) -> dict[str, Any]:
    row = dict.fromkeys(JOB_KEYS) if numbers is None else claim_row(numbers, *job)
    row["tenant"], row["any_ready"] = tenant, any_ready
    return row


# The statements whose rows come packed, and what reads them.
UNPACK: dict[str, Callable[[Sequence[tuple[Any, ...]]], list[dict[str, Any]]]] = {
    "claim_select": claim_rows,
    "claim_select_limited": claim_rows,
    "fair_turn": turn_rows,
}
