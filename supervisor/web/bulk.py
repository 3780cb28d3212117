"""Acting on every job a filter or a search matches: retry, discard, cancel.

Two steps, both POST (CSRF, read-only refused): the first only counts the matches and
shows a confirmation with the count; the second (confirmed=yes) acts. One request reads
the newest SEARCH_WINDOW jobs (web/search.py) and acts on at most BULK_LIMIT of the
matches, BULK_CHUNK ids a statement; when more match it says so, and pressing again
takes the next ones (those already acted on no longer match a status filter). Each
confirmed request is logged: who, what, the search, how many matched and changed.
"""

from __future__ import annotations

from werkzeug.exceptions import BadRequest
from werkzeug.wrappers import Response

from supervisor import events, logs
from supervisor.models import JobListing
from supervisor.store import Store
from supervisor.web import search
from supervisor.web.context import Context

BULK_LIMIT = 1000  # jobs one request acts on, at most
BULK_CHUNK = 100  # ids per statement
VERBS = {"retry": "retried", "discard": "discarded", "cancel": "cancelled"}
RETRIABLE = {"dead", "cancelled"}  # what a bulk retry runs again: never a waiting or done job


def jobs_bulk(ctx: Context) -> Response:
    form = ctx.request.form
    action = form.get("action", "")
    if action not in VERBS:
        raise BadRequest(f"action: one of {', '.join(VERBS)}")
    text = form.get("q", "").strip()[:1000]
    try:
        query = search.parse(text)
    except search.SearchError as exc:
        return ctx.back(f"nothing done: {exc}", fallback="jobs")
    matched = _matches(ctx.store, query, action)
    more = len(matched) > BULK_LIMIT
    matched = matched[:BULK_LIMIT]
    if form.get("confirmed") != "yes":
        return ctx.render(
            "bulk_confirm.html", nav="jobs", action=action, q=text, count=len(matched), more=more
        )
    changed = _act(ctx, action, [job.id for job in matched])
    logs.get(component="web").info(
        events.WEB_ACTION,
        action=f"bulk_{action}",
        client=ctx.request.remote_addr,
        **ctx.where(),
        who=ctx.who(),
        search=text,
        matched=len(matched),
        changed=changed,
        more_remain=more,
    )
    said = f"{VERBS[action]} {changed} of {len(matched)} matching jobs"
    if more:
        said += f"; more remain (at most {BULK_LIMIT:,} a request): press again"
    return ctx.back(said, fallback="jobs")


def _matches(store: Store, query: search.Search, action: str) -> list[JobListing]:
    """Up to BULK_LIMIT + 1 matches the action applies to, newest first."""
    ids = store.job_id_range()
    if ids is None:
        return []
    first, last = ids
    floor = max(first, last + 1 - search.SEARCH_WINDOW)
    jobs = store.search_jobs(last + 1, floor, search.SEARCH_WINDOW, query.terms)
    if action == "retry":
        jobs = [j for j in jobs if j.status in RETRIABLE]
    elif action == "discard":
        jobs = [j for j in jobs if j.status == "dead"]
    else:
        jobs = [
            j for j in jobs if j.status in {"waiting", "ready", "scheduled", "running", "claimed"}
        ]
    return jobs[: BULK_LIMIT + 1]


def _act(ctx: Context, action: str, ids: list[int]) -> int:
    store, changed = ctx.store, 0
    for start in range(0, len(ids), BULK_CHUNK):
        chunk = ids[start : start + BULK_CHUNK]
        if action == "retry":
            changed += store.retry_jobs(chunk)
        elif action == "discard":
            changed += store.discard_dead_jobs(chunk)
        else:
            results = store.cancel_jobs(chunk, by=ctx.who())
            changed += sum(1 for r in results.values() if r.ok)
    return changed
