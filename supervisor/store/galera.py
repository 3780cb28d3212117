"""A Galera cluster's nodes (`[database] nodes`): which one a session writes through.

One node at a time, the first of the list that answers and says it is Synced: claims
through two nodes at once cost certification conflicts (1213) for nothing, since every
node applies every write. A node that fails (or is not Synced) is tried last for
NODE_RECHECK seconds; a session on a later node looks at the earlier ones that often,
between transactions, and moves back to the first that is Synced again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from supervisor import events, logs
from supervisor.dburl import DatabaseURL
from supervisor.errors import ConnectionLost, DatabaseError

NODE_RECHECK = 15.0  # seconds a failed node is tried last; also how often to look back
RECHECK_CONNECT_TIMEOUT = 1.0  # a look back at an earlier node waits no longer than this


def node_trouble(rows: Sequence[Sequence[Any]]) -> str | None:
    """None when `SHOW STATUS` rows say this node takes writes (wsrep_ready ON, Synced);
    else why not."""
    status = {str(name).lower(): str(value) for name, value in rows}
    if "wsrep_local_state_comment" not in status:  # MySQL, or MariaDB with wsrep off
        return "not a Galera node (wsrep is off): nodes lists Galera nodes only"
    ready = status.get("wsrep_ready", "")
    state = status.get("wsrep_local_state_comment", "")
    if ready.upper() != "ON":
        return f"wsrep_ready is {ready or 'missing'}"
    if state != "Synced":
        return f"wsrep_local_state_comment is {state or 'missing'}, not Synced"
    return None


class NodeChoice:
    """Which node a session is on, and when each failed node may be tried first again."""

    def __init__(self, nodes: tuple[DatabaseURL, ...]) -> None:
        self.nodes = nodes
        self.current = 0
        self.down_until: dict[int, float] = {}
        self.look_back_at = 0.0

    def order(self) -> list[int]:
        """Nodes to try: those not failed lately, in the list's order, then the others."""
        now = time.monotonic()
        return sorted(range(len(self.nodes)), key=lambda i: (self.down_until.get(i, 0) > now, i))

    def failed(self, index: int) -> None:
        self.down_until[index] = time.monotonic() + NODE_RECHECK

    def chosen(self, index: int) -> None:
        if index != self.current:
            logs.get().info(
                events.DB_NODE_CHANGED,
                node=self.nodes[index].redacted(),
                was=self.nodes[self.current].redacted(),
            )
        self.current = index
        self.down_until.pop(index, None)
        self.look_back_at = time.monotonic() + NODE_RECHECK

    def due(self) -> bool:
        """Time to look back at the earlier nodes (only when on a later one)."""
        return self.current > 0 and time.monotonic() >= self.look_back_at

    def earlier(self) -> list[int]:
        """The nodes before the current one that did not fail lately."""
        self.look_back_at = time.monotonic() + NODE_RECHECK
        now = time.monotonic()
        return [i for i in range(self.current) if self.down_until.get(i, 0) <= now]


# Connects to a node (with a connect timeout, or the store's own on None) and reads its
# trouble (node_trouble): ConnectionLost or DatabaseError when it does not answer.
Opener = Callable[[DatabaseURL, float | None], tuple[Any, str | None]]


def open_synced(
    choice: NodeChoice, candidates: list[int], open_node: Opener, timeout: float | None = None
) -> tuple[Any, list[str]]:
    """A connection to the first of `candidates` that answers and is Synced, the choice
    recorded (or None), and what was wrong with each node tried before it."""
    problems: list[str] = []
    for index in candidates:
        node = choice.nodes[index]
        try:
            conn, trouble = open_node(node, timeout)
        except (ConnectionLost, DatabaseError) as exc:
            conn, trouble = None, str(exc)
        if conn is not None and trouble is None:
            choice.chosen(index)
            return conn, problems
        if conn is not None:
            close_quietly(conn)
        choice.failed(index)
        problems.append(f"{node.redacted()}: {trouble}")
    return None, problems


def close_quietly(conn: Any) -> None:
    with suppress(Exception):  # a node we leave or refuse: nothing more to do with it
        conn.close()
