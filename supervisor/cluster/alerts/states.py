"""The alerts' vocabulary: what a tick saw (`Snapshot`), a key's stored state, one rule
judged (`Check`), the message to send, and how keys and caps are made.

How a key moves between states is rules.py; what each rule checks is checks.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from supervisor.config import AlertRule, AlertsConfig
from supervisor.models import QueueStats

OK, FIRING = "ok", "firing"
QUEUE_RULES = ("max_ready", "max_age", "max_dead")
HOST_RULES = ("saturated", "crash_loop", "db_unreachable")
STATS_FLOOR = 10_000  # the check tick counts at least this far per queue and status

Kind = Literal["firing", "resolved", "reminder"]


@dataclass(frozen=True)
class Snapshot:
    """What one host saw on one check tick.

    `cluster` is False on a host that does not hold the chores lease this tick: it
    judges only its own host rules, and leaves the queue rules to the lease holder.
    """

    host: str
    queues: list[QueueStats]
    # pool -> consecutive check ticks at max_workers with a backlog
    saturated_ticks: dict[str, int] = field(default_factory=dict)
    # pools whose children keep dying at start-up
    crash_looping: set[str] = field(default_factory=set)
    # why the database could not be reached this tick (None: it could)
    db_error: str | None = None
    cluster: bool = True


@dataclass(frozen=True)
class AlertState:
    """One key's state as stored in forkq_alerts; `detail` is JSON (figures, last text, memory)."""

    state: str = OK
    detail: dict[str, Any] = field(default_factory=dict)
    since: float = 0.0  # when the state last changed
    notified_at: float | None = None  # when a message last went out; the cooldown counts from here

    @property
    def firing(self) -> bool:
        return self.state == FIRING

    @property
    def announced(self) -> bool:
        """Whether this firing episode has been told to anyone (it may be held back by cooldown)."""
        return bool(self.detail.get("announced"))

    @classmethod
    def from_store(cls, row: Mapping[str, Any]) -> AlertState:
        return cls(
            state=str(row.get("state") or OK),
            detail=dict(row.get("detail") or {}),
            since=float(row.get("since") or 0.0),
            notified_at=None if row.get("notified_at") is None else float(row["notified_at"]),
        )


@dataclass(frozen=True)
class Notification:
    key: str
    kind: Kind
    text: str

    @property
    def subject(self) -> str:
        """The first line, short enough for an email subject."""
        line = self.text.splitlines()[0] if self.text else self.key
        return line if len(line) <= 200 else line[:199] + "…"


@dataclass(frozen=True)
class Check:
    """One rule judged on this tick: whether it fires, and what a message would say."""

    key: str
    firing: bool
    what: str  # the firing line, without the "[forkq] host:" prefix
    resolved: str  # the resolved line, likewise
    memory: dict[str, Any] = field(default_factory=dict)  # kept every tick (max_dead's baseline)


def stats_cap(rules: AlertsConfig, floor: int = STATS_FLOOR) -> int:
    """The cap the check tick gives `Store.stats`: past every max_ready and max_dead, so a
    capped count still decides whether a rule fires, and at least `floor`.

    Counting stops there, which keeps the tick's cost flat however many rows the table
    holds (a count costs about one index entry read per job, up to the cap).
    """
    limits = [
        limit + 1
        for rule in (rules.defaults, *rules.rules.values())
        for limit in (rule.max_ready, rule.max_dead)
        if limit is not None
    ]
    return max([floor, *limits])


def rule_for(rules: AlertsConfig, queue: str) -> AlertRule:
    """A queue's rule (already merged with the defaults at config load), else the defaults."""
    return rules.rules.get(queue) or rules.defaults


def host_key(rule: str, host: str, name: str | None = None) -> str:
    return f"{rule}:{host}" if name is None else f"{rule}:{host}:{name}"


def is_host_key(key: str, host: str) -> bool:
    """Whether `key` is a host rule of `host` (only that host judges it)."""
    rule, _, rest = key.partition(":")
    return rule in HOST_RULES and (rest == host or rest.startswith(host + ":"))
