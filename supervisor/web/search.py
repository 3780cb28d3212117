"""The jobs page's search: `payload.KEY:VALUE`, `error:TEXT`, `tag:NAME`, `handler:NAME`,
`queue:NAME` and `status:NAME`, every term required, over the newest SEARCH_WINDOW jobs.
An unknown status (`status:bogus`) is refused with the statuses there are, a name given
twice with why: never a silent "no jobs".

Terms are whitespace-separated; a value with spaces is quoted (`error:"lost connection"`).
Every value reaches the database as a bound parameter: a payload key becomes a JSON path
only from letters, digits, `_` and `-`, each segment quoted.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from supervisor.models import JobListing, JobState
from supervisor.store import Store

SEARCH_WINDOW = 10_000  # the newest jobs a search reads, at most
FIELDS = ("queue", "status", "handler", "error", "tag")
STATUSES = [str(s) for s in JobState]  # what `status:` may name (the filter's too)
KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


class SearchError(ValueError):
    """A search that cannot be run, in words for the page."""


@dataclass(frozen=True)
class Search:
    text: str
    terms: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Found:
    jobs: list[JobListing]
    older: int | None  # ?before= of the next page inside the window, None at its end
    window: int  # how many of the newest jobs were searched (SEARCH_WINDOW, or fewer)
    lowest: int  # the lowest id in the window
    whole: bool = True  # the window holds every job there is: nothing older goes unsearched


def parse(text: str) -> Search:
    """The terms of `text`; SearchError says which term is wrong and why."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise SearchError(f"unbalanced quotes ({exc})") from None
    terms: dict[str, str | None] = {}
    for word in words:
        name, colon, value = word.partition(":")
        if not colon or not value:
            raise SearchError(f"{word!r}: expected NAME:VALUE, e.g. payload.user_id:42")
        if name.startswith("payload."):
            key, label = "path", "payload.KEY"
        elif name in FIELDS:
            key, label = name, name
        else:
            raise SearchError(f"{name!r}: search payload.KEY, {', '.join(FIELDS)}")
        if key in terms:  # one value a name: the first one would be dropped unsaid
            raise SearchError(f"{word!r}: a second {label} term; a search takes one of each")
        if key == "path":
            terms["path"] = _path(name[len("payload.") :])
            terms["value"] = value
        else:
            terms[name] = _status(value) if name == "status" else value
    if "error" in terms and terms["error"] is not None:
        terms["error"] = "%" + _like(terms["error"].lower()) + "%"
    return Search(text, terms)


def run(store: Store, search: Search, before: int | None, limit: int) -> Found:
    """One page of matches among the newest SEARCH_WINDOW jobs (ids below `before`)."""
    ids = store.job_id_range()
    if ids is None:
        return Found([], None, 0, 0)
    first, last = ids
    floor = max(first, last + 1 - SEARCH_WINDOW)
    top = min(before, last + 1) if before else last + 1
    jobs = store.search_jobs(top, floor, limit, search.terms) if top > floor else []
    older = jobs[-1].id if len(jobs) == limit else None
    return Found(jobs, older, last + 1 - floor, floor, floor <= first)


def _status(value: str) -> str:
    """`value` if it is a job status; else SearchError naming the statuses there are."""
    if value not in STATUSES:
        raise SearchError(f"unknown status {value!r}: the statuses are {', '.join(STATUSES)}")
    return value


def _path(key: str) -> str:
    segments = key.split(".")
    if not all(KEY.fullmatch(s) for s in segments):
        raise SearchError(f"payload.{key}: keys are letters, digits, _ and -, dot-separated")
    return "$" + "".join(f'."{s}"' for s in segments)


def _like(text: str) -> str:
    """`text` as a LIKE pattern matching itself (`!` escapes % and _)."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")
