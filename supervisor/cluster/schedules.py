"""Cron schedules: which slots are due (pure, given `now`), and enqueueing them once per cluster.

A slot is the UTC epoch second of one due time of a cron expression read in the
schedule's time zone; croniter reads the expression and zoneinfo the zone. Around
daylight-saving changes:

* a wall time that does not exist that day (02:30 when clocks jump 02:00 -> 03:00)
  runs when the clock jumps, at 03:00, so a daily job still runs that day;
* a wall time that happens twice (01:30 when clocks fall back) runs once, at its first
  occurrence, for schedules with fixed hours; schedules whose hour field is `*` follow
  real time and run in both hours (an hourly job runs every hour of the night).

Schedules added at runtime (forkq_schedules) are enqueued the same way; they start at
their `since` (when added or last resumed) instead of the daemon's boot.

Exactly once across hosts comes from the store: `enqueue_slot` inserts the unique
(schedule, slot) row in the same transaction as the job, so a second host that reaches
the same slot gets None and enqueues nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter

from supervisor import events, logs
from supervisor.building import build_job
from supervisor.config import Config, ScheduleConfig
from supervisor.errors import UsageError
from supervisor.store import Store

MAX_SKIPS = 1000  # guard against an iterator that keeps yielding times we skip


def due_slots(
    cron: str,
    tz: str,
    last_slot: float | None,
    now: float,
    misfire: str,
    created: float,
    grace: float = 60.0,
) -> list[float]:
    """The slots to enqueue now: at most one, the latest due time in (start, now].

    `start` is `last_slot`, or `created` (when the daemon first saw the schedule) if no
    slot was ever enqueued, so history is not backfilled. With `misfire="once"` slots
    missed while every host was down collapse into one run of the latest on recovery;
    with `"skip"` the latest runs only if it is at most `grace` seconds late (give it at
    least one check interval), and missed ones are dropped.
    """
    start = created if last_slot is None else last_slot
    zone = ZoneInfo(tz)
    first = next(_forward(cron, zone, start), None)
    if first is None or first > now:
        return []
    latest = _latest(cron, zone, now)
    if latest is None or latest < first:
        latest = first
    if misfire == "skip" and now - latest > grace:
        return []
    return [latest]


def next_run(cron: str, tz: str, now: float) -> float:
    """The first due time strictly after `now` (for `forkq status` and listings)."""
    found = next(_forward(cron, ZoneInfo(tz), now), None)
    if found is None:
        raise ValueError(f"cron expression {cron!r} never comes due")
    return found


def next_slot(cron: str, tz: str, now: float, last: float | None, grace: float) -> float:
    """The slot a listing names next: the one after `last` when it fell due within `grace`
    seconds (it waits for the check tick that enqueues it, up to check_interval late),
    else the first due after `now`."""
    if last is not None:
        pending = next_run(cron, tz, last)
        if now - grace <= pending <= now:
            return pending
    return next_run(cron, tz, now)


def active_schedules(
    from_file: Sequence[ScheduleConfig], runtime: Sequence[ScheduleConfig]
) -> list[ScheduleConfig]:
    """The schedules that enqueue: the file's, and those added at runtime that are not
    paused. A name in the file is the file's: a runtime row of that name is ignored."""
    names = {s.name for s in from_file}
    return [*from_file, *(s for s in runtime if s.name not in names and not s.paused)]


def enqueue_due(
    store: Store,
    schedules: Sequence[ScheduleConfig],
    now: float,
    started_at: float,
    grace: float,
) -> list[tuple[str, float, int]]:
    """Enqueue every due slot; returns (schedule, slot, job id) of what this call enqueued.

    Call it with the database clock (`store.db_now()`) so hosts agree on what is due.
    A slot another host already enqueued is silently left alone. Database errors
    propagate: the master's tick handles an unreachable database in one place.
    """
    log = logs.get(component="schedules")
    done: list[tuple[str, float, int]] = []
    for schedule in schedules:
        last = store.last_slot(schedule.name)
        start = started_at if schedule.since is None else schedule.since
        if last is not None and schedule.since is not None:
            last = max(last, schedule.since)  # added again, or resumed: nothing before since
        slots = due_slots(
            schedule.cron, schedule.timezone, last, now, schedule.misfire, start, grace
        )
        for slot in slots:
            try:
                payload = dict(schedule.payload)
                job = build_job(
                    schedule.handler,
                    payload,
                    schedule.queue or None,
                    0.0,
                    None,
                    schedule.priority,
                    None,
                    None,
                )
            except UsageError as exc:
                log.error(events.SCHEDULE_INVALID, schedule=schedule.name, error=str(exc))
                continue
            job_id = store.enqueue_slot(schedule.name, slot, job)
            if job_id is not None:  # the caller logs what was enqueued (schedule_enqueued)
                done.append((schedule.name, slot, job_id))
    return done


# --- schedules added at runtime (forkq schedule, the dashboard) ----------------------------

SCHEDULE_ACTIONS = ("pause", "resume", "remove")


def file_owns(config: Config, name: str) -> str | None:
    """Why a runtime change to `name` is refused, if the config file defines it."""
    if any(s.name == name for s in config.schedules):
        return (
            f"schedule {name!r} is defined in {config.source} ([schedules.{name}]):"
            " edit the file there and reload the daemons (SIGHUP)"
        )
    return None


def add_schedule(store: Store, config: Config, schedule: ScheduleConfig, by: str) -> None:
    """Record a schedule checked by `schedule_from`; UsageError if the name is taken."""
    reason = file_owns(config, schedule.name)
    if reason:
        raise UsageError(reason)
    store.add_schedule(schedule, by)


def change_schedule(store: Store, config: Config, name: str, action: str, by: str) -> str:
    """Pause, resume or remove a runtime schedule; what happened, in words."""
    reason = file_owns(config, name)
    if reason:
        raise UsageError(reason)
    if action == "remove":
        store.remove_schedule(name)
        return f"schedule {name} removed"
    if action == "pause":
        changed = store.pause_schedule(name, by)
    elif action == "resume":
        changed = store.resume_schedule(name, by)
    else:
        raise UsageError(f"unknown action {action!r} (expected {', '.join(SCHEDULE_ACTIONS)})")
    done = "paused" if action == "pause" else "resumed"
    return f"schedule {name} {done}" if changed else f"schedule {name} was already {done}"


# --- croniter, in a time zone, with the repeated-hour rule --------------------------------


def _local(ts: float, zone: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(ts, tz=zone)


def _real_time(cron: str) -> bool:
    """Whether the hour field is `*`: such schedules run in both copies of a repeated hour."""
    expanded = croniter(cron).expanded
    return bool(expanded[1] == ["*"])


def _repeat(ts: float, zone: ZoneInfo) -> bool:
    """Whether `ts` is the second occurrence of a wall time that happens twice (fall back)."""
    local = _local(ts, zone)
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def _walk(cron: str, zone: ZoneInfo, start: float, forward: bool) -> Iterator[float]:
    """Due times after (or before) `start`, strictly, in order, repeats dropped per the rule."""
    real_time = _real_time(cron)
    it = croniter(cron, _local(start, zone))
    skips = 0
    while skips < MAX_SKIPS:
        try:
            moment = it.get_next(datetime) if forward else it.get_prev(datetime)
        except (ValueError, KeyError, OverflowError):  # croniter found no further time
            return
        ts = float(moment.timestamp())
        if (ts <= start if forward else ts >= start) or (not real_time and _repeat(ts, zone)):
            skips += 1
            continue
        yield ts


def _forward(cron: str, zone: ZoneInfo, start: float) -> Iterator[float]:
    return _walk(cron, zone, start, forward=True)


def _latest(cron: str, zone: ZoneInfo, now: float) -> float | None:
    """The latest due time at or before `now`."""
    before = next(_walk(cron, zone, now, forward=False), None)
    if before is None:
        return None
    after = next(_forward(cron, zone, before), None)  # croniter's prev is strict: `now` itself?
    return after if after is not None and after <= now else before
