"""The pages: each reads what it shows with the store's bounded reads and renders a template.

Times are judged on the database clock (`store.db_now()`), as the daemon judges them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from werkzeug.exceptions import BadRequest
from werkzeug.utils import redirect
from werkzeug.wrappers import Response

from supervisor import events, logs
from supervisor.cluster.schedules import next_run, next_slot
from supervisor.config import ScheduleConfig
from supervisor.errors import DatabaseError, SchemaError
from supervisor.jobref import JobRef
from supervisor.models import Throughput
from supervisor.results import attempt_history, read_result, recorded_attempts
from supervisor.status import (
    STATUS_CAP,
    every_status_document,
    process_view,
    read_every_status,
    read_handlers,
    read_limits,
    read_status,
    status_document,
)
from supervisor.store import Store
from supervisor.web import alerts_page, search, timing_page
from supervisor.web.chart import HOURS, throughput_chart
from supervisor.web.context import Context, job_id_of, job_ref_of
from supervisor.web.listing import PAGE, Filters, job_page
from supervisor.web.security import SESSION_COOKIE, SESSION_LIFETIME

# The overview counts as `forkq status` does (STATUS_CAP), so the two always agree; the
# dead and queues pages need only a figure or two per queue and stop counting sooner.
PAGE_CAP = 10_000
NEXT_RUNS = 5  # upcoming runs shown per schedule
LAST_SLOTS = 10  # enqueued slots shown per schedule
STATUSES = search.STATUSES


def overview(ctx: Context) -> Response:
    hours = _choice(ctx.request.args.get("hours"), HOURS, 3)
    chart_queue = _name(ctx.request.args.get("queue"), 64)
    store = ctx.store
    queues, processes = read_status(ctx.config, store, STATUS_CAP)
    now = store.db_now()
    rows = store.throughput(hours * 3600)
    chart_rows = [r for r in rows if chart_queue is None or r.queue == chart_queue]
    alerts = alerts_page.read_alerts(store, now, alerts_page.stale_after(ctx))
    firing = [a for a in alerts if a["firing"]]
    return ctx.render(
        "overview.html",
        nav="overview",
        queues=queues,
        last_hour=_last_hour(rows, now),
        chart=throughput_chart(chart_rows, now, hours),
        hours=hours,
        hour_choices=HOURS,
        chart_queue=chart_queue,
        firing=firing,
        processes=processes,
        stale=sum(1 for p in processes if p["stale"]),
        hosts=sorted({p["host"] for p in processes}),
        cap=STATUS_CAP,
        now=now,
        every_database=ctx.app.databases.summary(STATUS_CAP),
    )


def jobs(ctx: Context) -> Response:
    args = ctx.request.args
    find = args.get("find", "").strip()
    found = _find(ctx, find)
    if found is not None:
        return found
    if args.get("q", "").strip():
        return _search(ctx, args.get("q", "").strip()[:1000])
    filters = Filters(
        queue=_name(args.get("queue"), 64),
        status=_name(args.get("status"), 16),
        handler=_name(args.get("handler"), 191),
    )
    if filters.status and filters.status not in STATUSES:  # said as the search says it
        return _search(ctx, filters.as_search())
    page = job_page(ctx.store, filters, _int(args.get("before")))
    return ctx.render(
        "jobs.html",
        status=404 if find else 200,  # the list, under "no job with id or unique key"
        nav="jobs",
        page=page,
        filters=filters,
        statuses=STATUSES,
        not_found=find or None,  # a `find` that led to no job
        q=None,
        problem=None,
        before=_int(args.get("before")),
        now=ctx.store.db_now(),
    )


def _search(ctx: Context, text: str) -> Response:
    """The jobs matching a search, among the newest SEARCH_WINDOW (see web/search.py)."""
    before = _int(ctx.request.args.get("before"))
    found, problem = None, None
    try:
        found = search.run(ctx.store, search.parse(text), before, PAGE)
    except search.SearchError as exc:
        problem = str(exc)
    return ctx.render(
        "jobs.html",
        status=400 if problem else 200,
        nav="jobs",
        page=None,
        found=found,
        q=text,
        problem=problem,
        filters=Filters(),
        statuses=STATUSES,
        not_found=None,
        before=before,
        now=ctx.store.db_now(),
    )


def _find(ctx: Context, text: str) -> Response | None:
    """`find` is a job id or a unique key: go to the job's page when there is one."""
    if not text:
        return None
    ref = job_ref_of(text)  # reports:42 names a job of another database, 42 one of this
    if ref is not None and ":" not in text:
        ref = JobRef(ctx.db, ref.id)
    names = ctx.app.databases.names
    if ref is not None and ref.database in names and _exists(ctx, ref):
        return redirect(ctx.url("job", job_id=ref), code=303)
    job_id = ctx.store.job_id_by_key(text[:191])
    if job_id is None:
        return None
    return redirect(ctx.url("job", job_id=job_id), code=303)


def _exists(ctx: Context, ref: JobRef) -> bool:
    """Whether `ref` is a job; yes in another database that does not answer (its page: 503)."""
    databases = ctx.app.databases
    try:
        return databases.store(ref.database).job_listing(ref.id) is not None
    except (DatabaseError, SchemaError) as exc:
        if ref.database == ctx.db:
            raise
        databases.failed(ref.database, databases.why(ref.database, exc))
        return True


def job(ctx: Context, job_id: int) -> Response:
    row = ctx.store.job_listing(job_id)
    if row is None:
        result = read_result(ctx.store, job_id)
        if result.kept:  # deleted on success (on_success = "delete"), its result kept
            attempts = recorded_attempts(ctx.store, job_id)
            return ctx.render(
                "job_gone.html", nav="jobs", job_id=job_id, result=result, attempts=attempts
            )
        gone = "one that succeeded is deleted unless its pool keeps it (on_success), "
        gone += "an ended one after its retention"
        return ctx.render("error.html", status=404, message=f"no job with id {job_id}: {gone}")
    return ctx.render(
        "job.html",
        nav="jobs",
        job=row,
        now=ctx.store.db_now(),
        parents=ctx.store.parents_of(job_id),  # depends_on: what it waits (waited) on
        dependents=ctx.store.dependents_of(job_id),
        result=read_result(ctx.store, job_id),
        attempts=attempt_history(ctx.store, row),
    )


def batch(ctx: Context, batch_id: int) -> Response:
    """One batch (q.batch()): its counts, callbacks and the jobs of it still in the table."""
    status = ctx.store.batch_status(batch_id)
    if status is None:
        return ctx.render("error.html", status=404, message=f"no batch with id {batch_id}")
    jobs = ctx.store.batch_jobs(batch_id, BATCH_JOBS_SHOWN)
    return ctx.render("batch.html", nav="jobs", batch=status, jobs=jobs, shown=BATCH_JOBS_SHOWN)


BATCH_JOBS_SHOWN = 200


def dead(ctx: Context) -> Response:
    queue = _name(ctx.request.args.get("queue"), 64)
    store = ctx.store
    queues = [q for q in store.stats(PAGE_CAP) if q.dead]
    page = job_page(
        store, Filters(queue=queue, status="dead"), _int(ctx.request.args.get("before"))
    )
    return ctx.render(
        "dead.html", nav="dead", queues=queues, queue=queue, page=page, now=store.db_now()
    )


def running(ctx: Context) -> Response:
    queue = _name(ctx.request.args.get("queue"), 64)
    store = ctx.store
    return ctx.render(
        "running.html",
        nav="running",
        jobs=store.running_jobs(queue),
        queue=queue,
        now=store.db_now(),
    )


def queues(ctx: Context) -> Response:
    store = ctx.store
    stats = store.stats(PAGE_CAP, queues=[pool.name for pool in ctx.config.pools])
    now = store.db_now()
    return ctx.render(
        "queues.html",
        nav="queues",
        queues=stats,
        pools={pool.name: pool for pool in ctx.config.pools},
        last_hour=_last_hour(store.throughput(3600), now),
        now=now,
    )


def processes(ctx: Context) -> Response:
    store = ctx.store
    stale_after = ctx.config.supervisor.process_stale_after
    rows, now = store.list_processes(), store.db_now()
    views = [process_view(p, now, stale_after) for p in rows]
    return ctx.render(
        "processes.html",
        nav="processes",
        processes=views,
        stale_after=stale_after,
    )


def schedules(ctx: Context) -> Response:
    store = ctx.store
    now = store.db_now()
    names = {s.name for s in ctx.config.schedules}
    every = [*ctx.config.schedules, *store.runtime_schedules()]
    grace = ctx.config.supervisor.check_interval  # a slot due waits for the next tick
    entries = [_schedule(store, s, now, grace) | {"shadowed": _shadowed(s, names)} for s in every]
    return ctx.render(
        "schedules.html", nav="schedules", schedules=entries, now=now, source=ctx.config.source
    )


def _shadowed(schedule: ScheduleConfig, file_names: set[str]) -> bool:
    """A runtime row named like a file schedule: the file's wins, the row is ignored."""
    return schedule.since is not None and schedule.name in file_names


def _schedule(store: Store, schedule: ScheduleConfig, now: float, grace: float) -> dict[str, Any]:
    slots = store.schedule_slots(schedule.name, LAST_SLOTS)
    last = slots[0][0] if slots else None  # newest first
    upcoming: list[float] = []
    with contextlib.suppress(ValueError):  # an expression that never comes due (Feb 30)
        upcoming.append(next_slot(schedule.cron, schedule.timezone, now, last, grace))
        while len(upcoming) < NEXT_RUNS:
            upcoming.append(next_run(schedule.cron, schedule.timezone, upcoming[-1]))
    return {"config": schedule, "next": upcoming, "slots": slots}


def locks(ctx: Context) -> Response:
    store = ctx.store
    return ctx.render("locks.html", nav="locks", locks=store.list_locks(), now=store.db_now())


def api_status(ctx: Context) -> Response:
    """Exactly what `forkq status --json` prints (status.py builds both): with several
    databases, each one's, and those that do not answer (`?db=NAME`: that one's alone)."""
    if ctx.app.databases.several and "db" not in ctx.request.args:
        config = ctx.app.config
        return ctx.json(every_status_document(config, STATUS_CAP, read_every_status(config)))
    queues, views = read_status(ctx.config, ctx.store, STATUS_CAP)
    limits = read_limits(ctx.config, ctx.store)
    handlers = read_handlers(ctx.store)
    return ctx.json(status_document(ctx.config, STATUS_CAP, queues, views, limits, handlers))


def login(ctx: Context) -> Response:
    guard = ctx.app.guard
    if not guard.required:
        return redirect(ctx.url("overview"), code=303)
    if ctx.request.method != "POST":
        return ctx.render("login.html", error=None, next=ctx.request.args.get("next", "/"))
    form = ctx.request.form
    if not guard.csrf_ok(ctx.session, form.get("csrf")):
        return ctx.render("login.html", status=403, error="the form expired: try again", next="/")
    if not guard.token_matches(form.get("token", "")):
        logs.get(component="web").warning(events.WEB_LOGIN_FAILED, client=ctx.request.remote_addr)
        return ctx.render("login.html", status=401, error="wrong token", next=form.get("next", "/"))
    session = guard.login()
    ctx.session = session
    ctx.cookies.append((SESSION_COOKIE, guard.encode(session), SESSION_LIFETIME))
    return ctx.back("logged in")


def _last_hour(rows: Sequence[Throughput], now: float) -> dict[str, tuple[int, int]]:
    """(done, failed) per queue over the last 60 minutes."""
    totals: dict[str, tuple[int, int]] = {}
    for row in rows:
        if row.minute >= now - 3600:
            done, failed = totals.get(row.queue, (0, 0))
            totals[row.queue] = (done + row.done, failed + row.failed)
    return totals


def _name(value: str | None, longest: int) -> str | None:
    """A queue, status or handler name from the query string; empty means none."""
    if not value:
        return None
    if len(value) > longest:
        raise BadRequest(f"a name of at most {longest} characters")
    return value


def _int(value: str | None) -> int | None:
    if not value:
        return None
    job_id = job_id_of(value)
    if job_id is None:
        raise BadRequest("expected a job id")
    return job_id


def _choice(value: str | None, choices: Sequence[int], default: int) -> int:
    return int(value) if value and value.isdigit() and int(value) in choices else default


PAGES: dict[str, Callable[..., Response]] = {
    "overview": overview,
    "jobs": jobs,
    "job": job,
    "batch": batch,
    "dead": dead,
    "running": running,
    "queues": queues,
    "processes": processes,
    "schedules": schedules,
    "alerts": alerts_page.alerts,
    "locks": locks,
    "api_status": api_status,
    "login": login,
    "handlers": timing_page.handlers,
}
