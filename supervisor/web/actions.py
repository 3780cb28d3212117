"""The actions: POST only, behind the CSRF and read-only checks of app.py. Each changes the
database through the store, logs what it did (`web_action`, with the client's address)
and sends the browser back to the page it came from with one line saying what happened."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from werkzeug.exceptions import BadRequest
from werkzeug.utils import redirect
from werkzeug.wrappers import Response

from supervisor import events, logs, registry
from supervisor.building import build_job
from supervisor.cluster.schedules import add_schedule, change_schedule
from supervisor.config import schedule_from
from supervisor.errors import ConfigError, UsageError
from supervisor.models import CancelResult
from supervisor.registry import queue_of
from supervisor.web.bulk import jobs_bulk
from supervisor.web.context import Context, job_id_of
from supervisor.web.security import SESSION_COOKIE, SESSION_LIFETIME

MOST_IDS = 1000  # ids one form may carry
NAMED_AT_MOST = 20  # jobs a retry left dead, named in its message


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def job_retry(ctx: Context, job_id: int) -> Response:
    changed = ctx.store.retry_jobs([job_id])
    _log(ctx, "retry", ids=[job_id], changed=changed)
    if changed:
        return ctx.back(f"job {ctx.ref(job_id)} will run again")
    return ctx.back(f"job {ctx.ref(job_id)} was not retried ({ctx.store.not_retried(job_id)})")


def job_discard(ctx: Context, job_id: int) -> Response:
    changed = ctx.store.discard_dead_jobs([job_id])
    _log(ctx, "discard", ids=[job_id], changed=changed)
    if not changed:
        return ctx.back(f"job {ctx.ref(job_id)} was not discarded: only dead jobs are")
    return ctx.back(f"job {ctx.ref(job_id)} discarded", fallback="dead", gone=True)


def job_cancel(ctx: Context, job_id: int) -> Response:
    return ctx.back(_cancel(ctx, [job_id]))


def running_cancel(ctx: Context) -> Response:
    return ctx.back(_cancel(ctx, _ids(ctx)), fallback="running")


def _cancel(ctx: Context, ids: Sequence[int]) -> str:
    results = ctx.store.cancel_jobs(ids, by=ctx.who())
    _log(ctx, "cancel", ids=list(ids), results={str(k): str(v) for k, v in results.items()})
    done = [ctx.ref(i) for i, r in results.items() if r == CancelResult.CANCELLED]
    stopping = [ctx.ref(i) for i, r in results.items() if r == CancelResult.CANCELLING]
    refused = [f"{ctx.ref(i)} ({r})" for i, r in results.items() if not r.ok]
    parts = []
    if done:
        parts.append(f"cancelled {_named(done)}")
    if stopping:
        where = "it runs" if len(stopping) == 1 else "they run"
        parts.append(f"cancelling {_named(stopping)} (stopped within 2 s where {where})")
    if refused:
        parts.append(f"not cancelled: {_named(refused)}")
    return "; ".join(parts) or "nothing to cancel"


def dead_retry(ctx: Context) -> Response:
    queue = _queue(ctx, required=False)
    if queue is not None and ctx.request.form.get("scope") == "all":
        changed, left = ctx.store.retry_dead(queue)
        what = f"every dead job of {queue}"
    else:
        ids = _ids(ctx)
        changed = ctx.store.retry_jobs(ids)
        left = ctx.store.still_dead(ids)
        what = plural(len(ids), "selected job")
    _log(ctx, "retry", queue=queue, changed=changed, left_dead=left[:100])
    said = f"retried {what}: {plural(changed, 'job')} will run again"
    if left:  # named with why, as `forkq retry` does (a unique key another job holds)
        named = [f"job {ctx.ref(i)} ({ctx.store.not_retried(i)})" for i in left[:NAMED_AT_MOST]]
        more = f" and {len(left) - NAMED_AT_MOST} more" if len(left) > NAMED_AT_MOST else ""
        said += f"; left dead: {', '.join(named)}{more}"
    return ctx.back(said, fallback="dead")


def dead_discard(ctx: Context) -> Response:
    queue = _queue(ctx, required=False)
    if queue is not None and ctx.request.form.get("scope") == "all":
        changed = ctx.store.discard_queue_dead(queue)
        what = f"every dead job of {queue}"
    else:
        ids = _ids(ctx)
        changed = ctx.store.discard_dead_jobs(ids)
        what = plural(len(ids), "selected job")
    _log(ctx, "discard", queue=queue, changed=changed)
    return ctx.back(f"discarded {what}: {plural(changed, 'job')} deleted", fallback="dead")


def queue_pause(ctx: Context) -> Response:
    return _set_paused(ctx, paused=True)


def queue_resume(ctx: Context) -> Response:
    return _set_paused(ctx, paused=False)


def _set_paused(ctx: Context, *, paused: bool) -> Response:
    queue = _queue(ctx, required=True)
    assert queue is not None
    ctx.store.set_paused(queue, paused)
    _log(ctx, "pause" if paused else "resume", queue=queue)
    return ctx.back(f"queue {queue} {'paused' if paused else 'resumed'}", fallback="queues")


def schedule_run(ctx: Context) -> Response:
    """Run now: one job as the schedule would enqueue it, outside its slots."""
    name = ctx.request.form.get("schedule", "")
    every = [*ctx.config.schedules, *ctx.store.runtime_schedules()]
    schedule = next((s for s in every if s.name == name), None)
    if schedule is None:
        raise BadRequest("no such schedule")
    job = build_job(
        schedule.handler,
        dict(schedule.payload),
        schedule.queue,
        0.0,
        None,
        schedule.priority,
        None,
        None,
    )
    job_id = ctx.store.enqueue(job)
    _log(ctx, "run_now", schedule=name, job_id=job_id)
    said = f"schedule {name}: job {ctx.ref(job_id)} enqueued to run now"
    return ctx.back(said, fallback="schedules")


def schedule_add(ctx: Context) -> Response:
    """Add a schedule at runtime; a refusal (a bad field, the file's name) says why."""
    form = ctx.request.form
    name = form.get("name", "").strip()
    fields: dict[str, Any] = {
        k: form.get(k, "").strip() or None for k in ("cron", "handler", "queue", "timezone")
    }
    try:
        fields["payload"] = json.loads(form.get("payload", "").strip() or "{}")
        schedule = schedule_from(name, fields)
        # Kept where its queue lives (without one, its handler's: forkq schedule add and
        # the daemons place it so), whose daemons run it.
        ctx.db = ctx.app.config.database_of(schedule.queue or queue_of(schedule.handler))
        add_schedule(ctx.store, ctx.config, schedule, ctx.who())
    except ValueError as exc:
        return ctx.back(f"schedule not added: payload is not JSON ({exc})", fallback="schedules")
    except (ConfigError, UsageError) as exc:
        return ctx.back(f"schedule not added: {exc}", fallback="schedules")
    _log(ctx, "schedule_add", schedule=name, cron=schedule.cron, handler=schedule.handler)
    where = f" in database {ctx.db}" if ctx.app.databases.several else ""
    # As `forkq schedule add` warns: added all the same (the daemons' config may differ).
    why = registry.unrunnable(ctx.config, schedule.handler, schedule.queue, "each of its jobs")
    return ctx.back("; ".join([f"schedule {name} added{where}", *why]), "schedules")


def schedule_change(ctx: Context, action: str) -> Response:
    """Pause, resume or remove a schedule added at runtime (the file's are refused)."""
    name = ctx.request.form.get("schedule", "")
    try:
        said = change_schedule(ctx.store, ctx.config, name, action, ctx.who())
    except UsageError as exc:
        return ctx.back(f"not done: {exc}", fallback="schedules")
    _log(ctx, f"schedule_{action}", schedule=name)
    return ctx.back(said, fallback="schedules")


def logout(ctx: Context) -> Response:
    guard = ctx.app.guard
    guard.log_out(ctx.session)  # its cookie, if replayed, no longer logs in
    ctx.cookies.append((SESSION_COOKIE, guard.encode(guard.new_session()), SESSION_LIFETIME))
    return redirect(ctx.url("login"), code=303)


def _ids(ctx: Context) -> list[int]:
    values = ctx.request.form.getlist("id")
    ids = [job_id_of(v) for v in values]
    if len(values) > MOST_IDS or None in ids:
        raise BadRequest(f"expected up to {MOST_IDS} job ids")
    return list(dict.fromkeys(i for i in ids if i is not None))


def _queue(ctx: Context, *, required: bool) -> str | None:
    queue = ctx.request.form.get("queue", "")
    if not queue:
        if required:
            raise BadRequest("which queue?")
        return None
    if len(queue) > 64:
        raise BadRequest("a queue name has at most 64 characters")
    return queue


def _log(ctx: Context, action: str, **details: object) -> None:
    logs.get(component="web").info(
        events.WEB_ACTION, action=action, client=ctx.request.remote_addr, **ctx.where(), **details
    )


ACTIONS: dict[str, Callable[..., Response]] = {
    "job_retry": job_retry,
    "job_discard": job_discard,
    "job_cancel": job_cancel,
    "dead_retry": dead_retry,
    "dead_discard": dead_discard,
    "running_cancel": running_cancel,
    "queue_pause": queue_pause,
    "queue_resume": queue_resume,
    "schedule_run": schedule_run,
    "schedule_add": schedule_add,
    "jobs_bulk": jobs_bulk,
    "schedule_pause": lambda ctx: schedule_change(ctx, "pause"),
    "schedule_resume": lambda ctx: schedule_change(ctx, "resume"),
    "schedule_remove": lambda ctx: schedule_change(ctx, "remove"),
    "logout": logout,
}


def _named(jobs: list[str]) -> str:
    """`job 7` or `jobs 7, 9`: ids, never read as a count."""
    return f"{'job' if len(jobs) == 1 else 'jobs'} {', '.join(jobs)}"
