"""Bulk actions on a filter or a search, in a real browser on both backends: a confirmation
with the count first, then at most 1,000 jobs a request ("more remain"), logged."""

from __future__ import annotations

import json
from typing import Any

from webutil import ServerFactory

from supervisor import Queue
from supervisor.models import JobState
from supervisor.store import Store

OWNER = "web-host:4242:cafe"


def dead_jobs(queue: Queue, store: Store, name: str, count: int) -> list[int]:
    ids = queue.enqueue_many(
        [{"handler": "report.build", "payload": {"n": n}, "queue": name} for n in range(count)]
    )
    assert sorted(r.id for r in store.claim(name, OWNER, count, 60)) == sorted(ids)
    for job_id in ids:
        assert store.fail(OWNER, job_id, "boom", dead=True)
    return ids


def statuses(store: Store, ids: list[int]) -> set[str | None]:
    return {None if (r := store.get_job(i)) is None else str(r.status) for i in ids}


def press(page: Any, name: str) -> None:
    with page.expect_navigation():
        page.get_by_role("button", name=name).first.click()


def test_retry_every_dead_job_of_a_filter_after_confirming_the_count(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    mine = dead_jobs(queue, store, "reports", 5)
    others = dead_jobs(queue, store, "other", 2)
    server = web_server()
    page.goto(f"{server.url}/jobs?queue=reports&status=dead")
    press(page, "retry all…")
    assert "5 jobs match" in page.inner_text(".bulk-count")
    assert statuses(store, mine) == {"dead"}  # the first step only counts
    press(page, "yes, retry 5 jobs")
    assert "retried 5 of 5 matching jobs" in page.inner_text(".flash")
    assert statuses(store, mine) == {JobState.READY} and statuses(store, others) == {"dead"}
    entries = [json.loads(line) for line in server.log.read_text().splitlines() if "{" in line]
    (logged,) = [e for e in entries if e.get("action") == "bulk_retry"]
    assert (logged["matched"], logged["changed"], logged["search"]) == (
        5,
        5,
        "queue:reports status:dead",
    )
    assert logged["who"].startswith("the dashboard")

    page.goto(f"{server.url}/jobs?q=queue:other")
    press(page, "discard all…")
    press(page, "yes, discard 2 jobs")
    assert "discarded 2 of 2" in page.inner_text(".flash")
    assert statuses(store, others) == {None}


def test_cancel_every_match_a_thousand_a_request_more_remain(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    ids = queue.enqueue_many(
        [{"handler": "t.noop", "payload": {"n": n}, "queue": "many"} for n in range(1005)]
    )
    server = web_server()
    page.goto(f"{server.url}/jobs?q=queue:many")
    press(page, "cancel all…")
    assert "1,000+ jobs match" in page.inner_text(".bulk-count")
    press(page, "yes, cancel 1,000 jobs")
    assert "cancelled 1000 of 1000 matching jobs; more remain" in page.inner_text(".flash")
    assert sum(1 for s in map(lambda i: store.get_job(i).status, ids) if s == "cancelled") == 1000  # type: ignore[union-attr]
    press(page, "cancel all…")
    assert "5 jobs match" in page.inner_text(".bulk-count")
    press(page, "yes, cancel 5 jobs")
    assert "cancelled 5 of 5" in page.inner_text(".flash")
    assert statuses(store, ids) == {"cancelled"}
    # Read-only refuses the first step too.
    server.stop()
    server = web_server(read_only=True)
    page.goto(f"{server.url}/jobs?q=queue:many")
    assert page.get_by_role("button", name="cancel all…").count() == 0
    response = page.request.post(
        server.url + "/jobs/bulk", form={"action": "retry", "q": "queue:many", "csrf": "x"}
    )
    assert response.status == 403
