"""Alert rules, decided as a pure function of a snapshot, the stored states and `now`.

The master builds a `Snapshot` on each check tick; `evaluate` says which alerts fire,
repeat or resolve, and returns the new states and the messages to send. Nothing here
does I/O: notify.py sends the messages, and the store keeps the states so that the
hosts of a cluster share them and one message goes out, not one per host.

Keys name the rule and what it watches. Queue rules (`max_ready:email`, `max_age:email`,
`max_dead:email`) are cluster-wide and judged by the host holding the chores lease.
Host rules (`saturated:HOST:POOL`, `crash_loop:HOST:POOL`, `db_unreachable:HOST`) carry
the host, because only that host sees them, so another host never resolves them.

Messages: one when an alert fires, at most one more per `cooldown` while it fires (a
reminder; `max_dead` resolves once no job died for a cooldown, so it reminds only while
jobs keep dying), and one when it resolves. An alert that comes back within `cooldown`
of the last message (a figure hovering around its threshold) is announced only once the
cooldown has passed, so flapping does not flood the channel; an alert that was never
announced resolves silently.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from supervisor.config import AlertRule, AlertsConfig
from supervisor.durations import format_duration as age
from supervisor.models import QueueStats

OK, FIRING = "ok", "firing"
QUEUE_RULES = ("max_ready", "max_age", "max_dead")
HOST_RULES = ("saturated", "crash_loop", "db_unreachable")
ERROR_CHARS = 300  # a database error quoted in a message is cut here
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


def evaluate(
    snapshot: Snapshot, rules: AlertsConfig, states: dict[str, AlertState], now: float
) -> tuple[dict[str, AlertState], list[Notification]]:
    """The new state of every key and the messages to send; keys not judged pass through."""
    new = dict(states)
    notes: list[Notification] = []
    for check in _checks(snapshot, rules, states, now):
        state, note = _step(check, states.get(check.key), now, rules.cooldown, snapshot.host)
        if state is not None:
            new[check.key] = state
        if note is not None:
            notes.append(note)
    return new, notes


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


# --- the transition: one key, one tick -------------------------------------------------


def _step(
    check: Check, prev: AlertState | None, now: float, cooldown: float, host: str
) -> tuple[AlertState | None, Notification | None]:
    if prev is None and not check.firing:
        return None, None  # nothing to remember about a rule that never fired
    prev = prev or AlertState()
    last = prev.notified_at
    recent = last is not None and now - last < cooldown
    if check.firing:
        since = prev.since if prev.firing else now
        if not prev.firing or not prev.announced:
            if recent:  # back within the cooldown of the last message: hold it back
                return _state(FIRING, check, prev, since, last, announced=False), None
            return _told(check, prev, since, now, "firing", host)
        if not recent:
            return _told(check, prev, since, now, "reminder", host)
        return _state(FIRING, check, prev, since, last, announced=True), None
    if prev.firing and prev.announced:
        state = _state(OK, check, prev, now, now, announced=False)
        return state, Notification(
            check.key, "resolved", f"[forkq] {host}: resolved: {check.resolved}"
        )
    since = now if prev.firing else prev.since
    return _state(OK, check, prev, since, last, announced=False), None


def _told(
    check: Check, prev: AlertState, since: float, now: float, kind: Kind, host: str
) -> tuple[AlertState, Notification]:
    if kind == "reminder":
        text = f"[forkq] {host}: still firing (for {age(now - since)}): {check.what}"
    else:
        text = f"[forkq] {host}: {check.what}"
    state = _state(FIRING, check, prev, since, now, announced=True, extra={"text": text})
    return state, Notification(check.key, kind, text)


def _state(
    state: str,
    check: Check,
    prev: AlertState,
    since: float,
    notified_at: float | None,
    *,
    announced: bool,
    extra: Mapping[str, Any] | None = None,
) -> AlertState:
    detail = {**prev.detail, **check.memory, **(extra or {}), "announced": announced}
    return AlertState(state, detail, since, notified_at)


# --- the rules ---------------------------------------------------------------------------


def _checks(
    snapshot: Snapshot, rules: AlertsConfig, states: dict[str, AlertState], now: float
) -> Iterator[Check]:
    host = snapshot.host
    yield _db_check(host, snapshot.db_error)
    crash = set(snapshot.crash_looping) | _names(states, "crash_loop", host)
    for pool in sorted(crash):
        yield _crash_check(host, pool, pool in snapshot.crash_looping)
    saturated = set(snapshot.saturated_ticks) | _names(states, "saturated", host)
    for pool in sorted(saturated):
        limit = rule_for(rules, pool).saturated_ticks
        yield _saturated_check(host, pool, snapshot.saturated_ticks.get(pool, 0), limit)
    if not snapshot.cluster or snapshot.db_error is not None:
        return  # queue figures are unknown, or another host judges them
    stats = {q.queue: q for q in snapshot.queues}
    for name in sorted(set(stats) | _queues(states)):
        queue = stats.get(name) or QueueStats(queue=name)  # a drained queue has no rows left
        rule = rule_for(rules, name)
        yield _ready_check(queue, rule.max_ready, states.get(f"max_ready:{name}"))
        yield _age_check(queue, rule.max_age)
        yield _dead_check(queue, rule.max_dead, states.get(f"max_dead:{name}"), now, rules.cooldown)


def _names(states: dict[str, AlertState], rule: str, host: str) -> set[str]:
    prefix = host_key(rule, host, "")
    return {key[len(prefix) :] for key in states if key.startswith(prefix)}


def _queues(states: dict[str, AlertState]) -> set[str]:
    out = set()
    for key in states:
        rule, _, queue = key.partition(":")
        if rule in QUEUE_RULES:
            out.add(queue)
    return out


def _db_check(host: str, error: str | None) -> Check:
    text = " ".join((error or "").split()).removeprefix("database unreachable: ")[:ERROR_CHARS]
    return Check(
        host_key("db_unreachable", host),
        error is not None,
        f"database unreachable: {text}",
        "database reachable again",
    )


def _crash_check(host: str, pool: str, looping: bool) -> Check:
    return Check(
        host_key("crash_loop", host, pool),
        looping,
        f'pool "{pool}" crash-looping: its workers keep dying at start-up (respawned with back-off)',
        f'pool "{pool}" workers start normally again',
    )


def _saturated_check(host: str, pool: str, ticks: int, limit: int | None) -> Check:
    return Check(
        host_key("saturated", host, pool),
        limit is not None and ticks >= limit,
        f'pool "{pool}" saturated: all max_workers busy with a backlog for {ticks} checks'
        f" >= saturated_ticks {limit}",
        f'pool "{pool}" no longer saturated',
    )


def _ready_check(q: QueueStats, limit: int | None, prev: AlertState | None) -> Check:
    """A capped count is a lower bound: at or past the limit it fires; below it (a cap
    under the limit: `stats_cap` avoids that) it tells nothing and the state holds."""
    where = _where(q)
    firing = limit is not None and q.ready > limit
    if limit is not None and "ready" in q.capped and not firing:
        firing = q.ready >= limit or (prev is not None and prev.firing)
    ready = q.shown("ready")
    return Check(
        f"max_ready:{q.queue}",
        firing,
        f"{where} backlog {ready} ready > max_ready {limit} (oldest waited {age(q.oldest_ready_age)})",
        f"{where} backlog {ready} ready <= {limit}"
        if limit is not None
        else f"{where} max_ready rule removed",
    )


def _age_check(q: QueueStats, limit: float | None) -> Check:
    where = _where(q)
    oldest = age(q.oldest_ready_age)
    return Check(
        f"max_age:{q.queue}",
        limit is not None and q.ready > 0 and q.oldest_ready_age > limit,
        f"{where} oldest ready job waited {oldest} > max_age {age(limit or 0)}"
        f" ({q.shown('ready')} ready)",
        f"{where} oldest ready job waited {oldest} <= {age(limit)}"
        if limit is not None
        else f"{where} max_age rule removed",
    )


def _dead_check(
    q: QueueStats, limit: int | None, prev: AlertState | None, now: float, cooldown: float
) -> Check:
    """New dead jobs: more than `limit` died since the remembered baseline.

    It stays firing while jobs keep dying; once none died for a cooldown it resolves
    and the baseline moves up to the current count, so it fires again only on new
    ones. A drop in the count (retry, purge, pruning) lowers the baseline. Until the
    first message the baseline is 0: dead jobs nobody was told about count as new.

    A count that reached the stats cap is judged by `_dead_capped`.
    """
    if "dead" in q.capped:
        return _dead_capped(q, limit, prev, now)
    detail = prev.detail if prev else {}
    dead, firing_before = q.dead, prev is not None and prev.firing
    baseline = min(int(detail.get("baseline", 0)), dead)
    seen = int(detail.get("seen", dead))
    rose_at = float(detail.get("rose_at", prev.since if prev else now)) if dead <= seen else now
    fresh = dead - baseline
    firing = limit is not None and fresh > limit
    if (
        firing
        and firing_before
        and prev is not None
        and prev.announced
        and now - rose_at >= cooldown
    ):
        firing = False  # none died for a whole cooldown: this wave is over
    if firing_before and not firing:
        baseline = dead
    where = _where(q)
    if dead < seen:
        resolved = f"{where} dead jobs down to {dead} (retried or purged)"
    else:
        resolved = f"{where} no new dead jobs for {age(now - rose_at)} ({dead} dead in all)"
    return Check(
        f"max_dead:{q.queue}",
        firing,
        f"{where} {fresh} new dead jobs > max_dead {limit} ({dead} dead in all; forkq jobs --status dead)",
        resolved,
        memory={"baseline": baseline, "seen": dead, "rose_at": rose_at},
    )


def _dead_capped(q: QueueStats, limit: int | None, prev: AlertState | None, now: float) -> Check:
    """max_dead when the dead count stopped at the cap: it is only a lower bound.

    New deaths can no longer be told from old ones, so: the alert fires when the lower
    bound alone is more than `limit` above the baseline (then it is sure); a firing
    alert stays firing, with its reminders, and never resolves for lack of new deaths
    (it cannot see them) until retries or purges bring the count under the cap; the
    baseline never moves on a capped count. A lower bound above the last count still
    proves that jobs died (`rose_at`).
    """
    detail = prev.detail if prev else {}
    firing_before = prev is not None and prev.firing
    baseline = int(detail.get("baseline", 0))
    seen = int(detail.get("seen", 0))
    rose_at = float(detail.get("rose_at", prev.since if prev else now))
    if q.dead > seen:
        rose_at, seen = now, q.dead
    fresh = max(0, q.dead - baseline)
    where = _where(q)
    return Check(
        f"max_dead:{q.queue}",
        limit is not None and (firing_before or fresh > limit),
        f"{where} {fresh}+ new dead jobs > max_dead {limit} ({q.dead}+ dead in all, past the"
        " count cap: new ones cannot be told from old until retries or purges bring it under;"
        " forkq jobs --status dead)",
        f"{where} max_dead rule removed",
        memory={"baseline": baseline, "seen": seen, "rose_at": rose_at},
    )


def _where(q: QueueStats) -> str:
    return f'queue "{q.queue}"' + (" (paused)" if q.paused else "")
