"""The handlers page: per-handler attempts, failure rate and duration percentiles over a
range, from the rows each master's heartbeat writes (forkq_handler_stats), never from the
jobs table; and one handler's duration and failure rate per minute, charted."""

from __future__ import annotations

from dataclasses import dataclass

from werkzeug.exceptions import BadRequest
from werkzeug.wrappers import Response

from supervisor.timing import Stats, merge, seconds_text
from supervisor.web.chart import HOURS
from supervisor.web.context import Context
from supervisor.web.timing_chart import timing_chart


@dataclass(frozen=True)
class HandlerRow:
    handler: str
    jobs: int
    failed: int
    rate: str
    p50: str
    p95: str
    mean: str
    slowest: str


def handler_row(handler: str, stats: Stats) -> HandlerRow:
    return HandlerRow(
        handler,
        stats.jobs,
        stats.failed,
        f"{stats.failure_rate:.1%}",
        seconds_text(stats.percentile(0.5)),
        seconds_text(stats.percentile(0.95)),
        seconds_text(stats.seconds / stats.jobs if stats.jobs else None),
        seconds_text(stats.slowest),
    )


def handlers(ctx: Context) -> Response:
    args = ctx.request.args
    hours_text = args.get("hours", "")
    hours = int(hours_text) if hours_text.isdigit() and int(hours_text) in HOURS else 1
    chosen = args.get("handler") or None
    if chosen is not None and len(chosen) > 191:
        raise BadRequest("a handler name of at most 191 characters")
    store = ctx.store
    now = store.db_now()
    totals = merge(store.handler_stats(hours * 3600))
    rows = sorted(
        (handler_row(h, s) for h, s in totals.items()), key=lambda r: (-r.jobs, r.handler)
    )
    chart = None
    if chosen is not None:
        chart = timing_chart(store.handler_series(chosen, hours * 3600), now, hours)
    return ctx.render(
        "handlers.html",
        nav="handlers",
        rows=rows,
        hours=hours,
        hour_choices=HOURS,
        chosen=chosen,
        chart=chart,
    )
