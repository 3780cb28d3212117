"""Values forkq binds its own way on MySQL, each with an encoder registered at connect.

Epoch seconds from a datetime (core.Seconds) go as an exact decimal to the microsecond.
PyMySQL writes a float as a DOUBLE literal (`1893456000.556896e0`), which FROM_UNIXTIME
truncates: half of all run_at values read back a microsecond early.

A list of job ids bound for MySQL's `IN %(ids)s` is escaped in one step.

PyMySQL escapes a tuple item by item (a type lookup and an encoder call each): with a
claim's and an acknowledgement's ids, about a microsecond a job. Ids that are all ints
are bound as IntIds instead, which the connection's encoder (registered at connect)
writes as `(1,2,3)` at once: an int's decimal digits need no escaping. Anything else (a
queue name, a bool) stays a tuple and is escaped as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from supervisor.store.core import Seconds


class IntIds(tuple[int, ...]):
    """Ids known to be ints (type int exactly: checked where it is made)."""


def bound_ids(ids: Sequence[int | str]) -> tuple[int | str, ...]:
    """`ids` for `IN %(name)s`: IntIds when every one is an int, else a plain tuple."""
    if all(type(i) is int for i in ids):
        return IntIds(ids)  # type: ignore[arg-type]  # (checked just above)
    return tuple(ids)


def escape_int_ids(ids: IntIds, mapping: Any = None) -> str:
    """The encoder PyMySQL calls for IntIds (as `escape_item` calls any: value, mapping)."""
    return "(" + ",".join(map(int.__repr__, ids)) + ")"


def escape_seconds(value: Seconds, mapping: Any = None) -> str:
    """The encoder for Seconds: a decimal literal with six places, rounded to the nearest
    (a float of today's epoch is within a ten-millionth of a second of the microsecond)."""
    return f"{value:.6f}"


def exact_seconds(params: dict[str, Any]) -> dict[str, Any]:
    """`params` for a connection that is not forkq's own (a caller's transaction), whose
    encoders do not know Seconds: each as a Decimal, which PyMySQL writes exactly too."""
    return {k: Decimal(f"{v:.6f}") if type(v) is Seconds else v for k, v in params.items()}
