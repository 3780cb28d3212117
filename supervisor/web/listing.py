"""Pages of jobs, newest first, that cost the same at 10k jobs and at 1M.

Lists page by id (`?before=ID`), never by OFFSET. Two ways to read a page, chosen per
request so neither ever walks millions of rows:

* a status that holds few jobs (up to SORT_CAP, counted from its index range with a
  LIMIT) is read from the status index and sorted: exact pages, however sparse the ids;
* anything else is read from the primary key, newest first, at most WINDOW ids per page:
  dense matches fill the page at once; sparse ones (a rare handler among millions) give
  a short page that says how far down it looked and offers to look further.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from supervisor.models import JobListing
from supervisor.store import Store

PAGE = 50  # jobs per page
WINDOW = 20_000  # primary-key rows one page may read when its filters match sparsely
SORT_CAP = 5_000  # a status with at most this many jobs is listed from its index, sorted


@dataclass(frozen=True)
class Filters:
    queue: str | None = None
    status: str | None = None
    handler: str | None = None

    def as_query(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v}

    def as_search(self) -> str:
        """The same filter as search terms (web/search.py), for the bulk actions."""
        return " ".join(f"{k}:{shlex.quote(v)}" for k, v in self.as_query().items())


@dataclass(frozen=True)
class JobPage:
    jobs: list[JobListing]
    older: int | None  # ?before= of the next page, None at the end
    searched_down_to: int | None  # the page is short because the window stopped at this id


def job_page(store: Store, filters: Filters, before: int | None, limit: int = PAGE) -> JobPage:
    """One page of jobs with id < `before` (the newest when None) that match `filters`."""
    ids = store.job_id_range()
    if ids is None:
        return JobPage([], None, None)
    first, last = ids
    top = min(before, last + 1) if before else last + 1
    status = filters.status
    if status and store.count_status(status, filters.queue, SORT_CAP) <= SORT_CAP:
        jobs = store.jobs_by_status(status, filters.queue, filters.handler, top, limit)
        return JobPage(jobs, jobs[-1].id if len(jobs) == limit else None, None)
    floor = max(first, top - WINDOW)
    jobs = store.jobs_window(
        top,
        floor,
        limit,
        queue=filters.queue,
        status=status,
        handler=filters.handler,
    )
    if len(jobs) == limit:
        return JobPage(jobs, jobs[-1].id, None)
    if floor > first:  # the window ended before the table did: more may match below
        return JobPage(jobs, floor, floor)
    return JobPage(jobs, None, None)
