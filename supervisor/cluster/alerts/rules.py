"""Alert rules, decided as a pure function of a snapshot, the stored states and `now`.

The master builds a `Snapshot` on each check tick; `evaluate` says which alerts fire,
repeat or resolve, and returns the new states and the messages to send. Nothing here
does I/O: notify.py sends the messages, and the store keeps the states so that the
hosts of a cluster share them and one message goes out, not one per host.

The alerts' types and key helpers are states.py; what each rule checks is checks.py;
this module holds how a key moves between states and which messages go out.

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

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from supervisor.cluster.alerts.checks import checks
from supervisor.cluster.alerts.states import (
    FIRING,
    OK,
    AlertState,
    Check,
    Kind,
    Notification,
    Snapshot,
)
from supervisor.config import AlertsConfig
from supervisor.durations import format_duration as age


def evaluate(
    snapshot: Snapshot, rules: AlertsConfig, states: dict[str, AlertState], now: float
) -> tuple[dict[str, AlertState], list[Notification]]:
    """The new state of every key and the messages to send; keys not judged pass through."""
    new = dict(states)
    notes: list[Notification] = []
    for check in checks(snapshot, rules, states, now):
        state, note = _step(check, states.get(check.key), now, rules.cooldown, snapshot.host)
        if state is not None and state.firing:  # the page reads the figure now, and when
            current = {"current": f"[forkq] {snapshot.host}: {check.what}", "judged_at": now}
            state = replace(state, detail={**state.detail, **current})
        if state is not None:
            new[check.key] = state
        if note is not None:
            notes.append(note)
    return new, notes


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
    # Kept in the row, so the dashboard shows a resolved alert in the words of its end
    # (also one that resolves unannounced), not in the firing text it keeps beside it.
    resolved = {"resolved_text": f"[forkq] {host}: resolved: {check.resolved}"}
    if prev.firing and prev.announced:
        state = _state(OK, check, prev, now, now, announced=False, extra=resolved)
        return state, Notification(check.key, "resolved", resolved["resolved_text"])
    if prev.firing:
        return _state(OK, check, prev, now, last, announced=False, extra=resolved), None
    return _state(OK, check, prev, prev.since, last, announced=False), None


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
