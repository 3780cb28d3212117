"""The alerts page, and the overview's firing alerts: forkq_alerts' rows in words.

A firing alert reads as the message that was sent ("[forkq] app1: queue "email" backlog
1523 ready > max_ready 1000 (...)"). A resolved one must not read so: its row keeps the
last firing message (`detail.text`) and the words of its end (`detail.resolved_text`,
since rules.py kept them; for a row an older forkq resolved, the page words it from the
rule's key: 'resolved: queue "email" backlog no longer over max_ready'), and the page
shows the firing message beside it, marked as what was said when it fired.
"""

from __future__ import annotations

from typing import Any

from werkzeug.wrappers import Response

from supervisor.store import Store
from supervisor.web.context import Context

FIRING = "firing"
STALE_TICKS = 3  # check ticks without a judgement before a firing alert is said unjudged


def alerts(ctx: Context) -> Response:
    store = ctx.store
    now = store.db_now()
    shown = read_alerts(store, now, stale_after(ctx))
    return ctx.render("alerts.html", nav="alerts", alerts=shown, now=now)


def stale_after(ctx: Context) -> float:
    """Seconds after which a firing alert nobody judged again is said to be so (three
    check ticks of this config: the lease holder's may differ, it is a hint)."""
    return STALE_TICKS * ctx.config.supervisor.check_interval


def read_alerts(store: Store, now: float, stale: float) -> list[dict[str, Any]]:
    """Every alert's view, firing first, then the most recent changes."""
    rows = [view(key, value, now, stale) for key, value in store.load_alerts().items()]
    return sorted(rows, key=lambda a: (not a["firing"], -(a["since"] or 0)))


def view(key: str, row: dict[str, Any], now: float, stale: float) -> dict[str, Any]:
    """What the pages show of one row of forkq_alerts (load_alerts' dict). A firing one
    reads as the figure when last judged (rules.py keeps it each tick), with the message
    sent beside it when that differs; one no tick judged for a while says since when."""
    firing = row["state"] == FIRING
    detail = row.get("detail") or {}
    text, ended = detail.get("text"), detail.get("resolved_text")
    said = str(text) if text else None
    current = str(detail["current"]) if firing and detail.get("current") else None
    judged = float(detail["judged_at"]) if firing and detail.get("judged_at") else None
    return {
        "key": key,
        "state": row["state"],
        "firing": firing,
        "message": (current or said or key) if firing else str(ended or resolved_text(key)),
        "said": said if current and said and said != current else None,
        "unjudged_since": judged if judged is not None and now - judged > stale else None,
        "fired": None if firing else said,  # the last firing message, shown as past
        "since": row["since"],
        # A message with no channel to take it went nowhere: never notified (rules.py still
        # counts its cooldown from it).
        "notified_at": row["notified_at"] if detail.get("sent_to", True) else None,
        "unsent": detail.get("sent_to") == [] and not detail.get("owed"),
        # Channels that have not taken its last message yet (a webhook down): each tick
        # tries them again (cluster/alerts/owed.py).
        "owed": sorted(detail.get("owed") or {}),
    }


def resolved_text(key: str) -> str:
    """What resolved, from the rule's key: queue rules are `RULE:QUEUE`, host rules
    `RULE:HOST[:POOL]` (cluster/alerts/states.py); a key of no known rule as it is."""
    rule, _, rest = key.partition(":")
    host, _, pool = rest.partition(":")
    queue_rules = {
        "max_ready": "backlog no longer over max_ready",
        "max_age": "oldest ready job no longer over max_age",
        "max_dead": "new dead jobs no longer over max_dead",
    }
    host_rules = {  # judged by the host itself, which the message names
        "saturated": f'pool "{pool}" no longer saturated',
        "crash_loop": f'pool "{pool}" workers start normally again',
        "db_unreachable": "database reachable again",
    }
    if rest and rule in queue_rules:
        return f'resolved: queue "{rest}" {queue_rules[rule]}'
    if host and rule in host_rules:
        return f"[forkq] {host}: resolved: {host_rules[rule]}"
    return f"resolved: {key}"
