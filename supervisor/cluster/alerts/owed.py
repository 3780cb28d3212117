"""Messages one channel missed while another took them (a webhook down, the mail up).

The alert's state then reads as told, so the rules would never send that message again;
the channel that missed it is owed it instead: `detail.owed` of the state keeps, per
channel, the newest message it did not take, and each later tick tries that channel
alone until it does. A newer message of the same alert that reaches the channel settles
what it was owed (the newer one says where the alert stands).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from supervisor.cluster.alerts.states import AlertState, Notification

OWED = "owed"  # detail key: {channel: [kind, text]}

Send = Callable[[Notification, str], bool]  # one message on one channel: taken or not


def owe(new: dict[str, AlertState], note: Notification, missed: Iterable[str]) -> None:
    """After `note` went out: the channels in `missed` are owed it, the others nothing."""
    state = new.get(note.key)
    owed = {channel: [note.kind, note.text] for channel in missed}
    if state is not None and (owed or state.detail.get(OWED)):
        new[note.key] = replace(state, detail={**state.detail, OWED: owed})


def introduce(new: dict[str, AlertState], told: set[str], configured: set[str]) -> None:
    """A channel configured since an alert was announced (a reload added it; or none was
    configured then) is owed the alert's last message while it fires, so it hears of it
    at this tick, not a cooldown later. Keys `told` this tick, and rows that do not say
    who heard them (an older forkq's), are left as they are."""
    for key, state in list(new.items()):
        heard, text = state.detail.get("sent_to"), state.detail.get("text")
        if key in told or not state.firing or not state.announced or heard is None or not text:
            continue
        owed = dict(state.detail.get(OWED) or {})
        missing = configured - set(heard) - set(owed)
        if missing:
            owed.update({channel: ["firing", text] for channel in sorted(missing)})
            new[key] = replace(state, detail={**state.detail, OWED: owed})


def pay(
    new: dict[str, AlertState],
    told: set[str],
    configured: set[str],
    failed: set[str],
    send: Send,
) -> list[tuple[Notification, str]]:
    """Try each owed message on its channel, except for keys `told` this tick and channels
    that `failed` this tick; a channel no longer configured is owed nothing. Returns what
    was taken (message, channel); `failed` gains the channels that failed now."""
    paid = []
    for key, state in list(new.items()):
        owed = state.detail.get(OWED)
        if key in told or not owed:
            continue
        still, took = {}, list(state.detail.get("sent_to") or [])
        for channel, (kind, text) in owed.items():
            if channel not in configured:
                continue
            note = Notification(key, kind, text)
            if channel not in failed and send(note, channel):
                paid.append((note, channel))
                took.append(channel)  # who heard it (the page: when it was notified)
                continue
            failed.add(channel)
            still[channel] = [kind, text]
        if still != owed:
            new[key] = replace(state, detail={**state.detail, OWED: still, "sent_to": took})
    return paid
