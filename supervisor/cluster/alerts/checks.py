"""What each alert rule checks on one tick: a `Check` per key, pure (no I/O, no clock
but the `now` it is given)."""

from __future__ import annotations

from collections.abc import Iterator

from supervisor.cluster.alerts.states import (
    QUEUE_RULES,
    AlertState,
    Check,
    Snapshot,
    host_key,
    rule_for,
)
from supervisor.config import AlertsConfig
from supervisor.durations import format_duration as age
from supervisor.models import QueueStats

ERROR_CHARS = 300  # a database error quoted in a message is cut here


def checks(
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
        f'pool "{pool}" no longer saturated'
        if limit is not None
        else f'pool "{pool}" saturated_ticks rule removed',
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
    if limit is not None and oldest == age(limit):  # "30s > max_age 30s" reads false
        oldest = f"{q.oldest_ready_age:.1f}s"
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
        and now - (prev.notified_at or 0.0) >= cooldown
    ):
        # None died for a whole cooldown: this wave is over. Never within a cooldown of the
        # last message (one a cooldown held back says a job died, and "resolved" 5 s later
        # would say nothing new: at most one message per alert per cooldown).
        firing = False
    if firing_before and not firing:
        baseline = dead
    where = _where(q)
    resolved = _dead_resolved(where, limit, dead, seen, fresh, age(now - rose_at))
    return Check(
        f"max_dead:{q.queue}",
        firing,
        f"{where} {fresh} new dead job{'' if fresh == 1 else 's'} > max_dead {limit}"
        f" ({dead} dead in all; forkq jobs --status dead)",
        resolved,
        memory={"baseline": baseline, "seen": dead, "rose_at": rose_at},
    )


def _dead_resolved(
    where: str, limit: int | None, dead: int, seen: int, fresh: int, quiet: str
) -> str:
    """Why max_dead resolved: its rule gone, retries or purges, a HUP that raised it past
    the new dead jobs, or none died for a cooldown (`quiet`)."""
    if limit is None:
        return f"{where} max_dead rule removed"
    if dead < seen:
        return f"{where} dead jobs down to {dead} (retried or purged)"
    if fresh <= limit:
        return f"{where} {fresh} new dead <= max_dead {limit} ({dead} dead in all)"
    return f"{where} no new dead jobs for {quiet} ({dead} dead in all)"


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
