"""The handlers page: per-handler attempts, failure rate and p50/p95 that a real daemon's
heartbeats wrote (forkq_handler_stats), the handler's charts, and its live refresh region
(both backends, a real browser)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from daemon_util import Daemon, daemons_fixture  # noqa: F401
from util import wait_until
from webutil import ServerFactory

from supervisor import Queue
from supervisor.store import Store
from supervisor.timing import merge


def table(page: Any) -> dict[str, dict[str, str]]:
    return page.eval_on_selector_all(
        "tr[data-handler]",
        """rows => Object.fromEntries(rows.map(row => [row.dataset.handler, Object.fromEntries(
            [...row.querySelectorAll('[data-stat]')].map(c => [c.dataset.stat, c.textContent.trim()])
        )]))""",
    )


def test_the_handlers_page_shows_what_the_daemon_timed(
    page: Any,
    web_server: ServerFactory,
    daemons: Callable[..., Daemon],
    queue: Queue,
    store: Store,
) -> None:
    daemon = daemons(name="timing", pools={"work": {"workers": 2}})
    daemon.start().wait_ready()
    queue.enqueue_many([{"handler": "t.noop", "payload": {}, "queue": "work"}] * 6)
    queue.enqueue_many([{"handler": "t.sleep", "payload": {"seconds": 0.2}, "queue": "work"}] * 4)
    for _ in range(2):
        queue.enqueue("t.fail", {}, queue="work", max_attempts=1)
    wanted = {"t.noop": 6, "t.sleep": 4, "t.fail": 2}
    wait_until(
        lambda: {h: s.jobs for h, s in merge(store.handler_stats(3600)).items()} == wanted,
        timeout=30,
        message=f"the handler rows ({daemon.describe()})",
    )
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    server = web_server()
    page.goto(server.url + "/handlers")
    shown = table(page)
    assert {h: int(r["jobs"]) for h, r in shown.items()} == wanted
    assert shown["t.fail"]["rate"] == "100.0%" and shown["t.noop"]["rate"] == "0.0%"
    assert shown["t.fail"]["failed"] == "2" and shown["t.sleep"]["failed"] == "0"
    p50 = shown["t.sleep"]["p50"]  # sleep(0.2): about 200 ms, never the noop's figure
    assert p50.endswith(" ms") and 200 <= float(p50.split()[0]) < 256, p50
    assert page.locator("nav a.here").inner_text() == "Handlers"
    queue.enqueue_many([{"handler": "t.noop", "payload": {}, "queue": "work"}] * 3)
    page.wait_for_function(  # live: the table follows the next heartbeat without a reload
        """() => document.querySelector('tr[data-handler="t.noop"] [data-stat=jobs]')
            .textContent.trim() === '9'""",
        timeout=30_000,
    )
    page.click('tr[data-handler="t.sleep"] a')
    page.wait_for_selector("#timing-chart svg polyline.p50", state="attached")
    titles = page.locator("#timing-chart g.point title").all_text_contents()
    points = [re.search(r"(\d+) attempts, (\d+) failed .*, p50 (\d+) ms", t) for t in titles]
    assert all(points), titles  # the four can straddle a minute: one point per minute
    assert sum(int(p[1]) for p in points if p) == 4, titles
    assert all(p[2] == "0" and 200 <= int(p[3]) < 300 for p in points if p), titles
    assert page.locator("#timing-chart").get_attribute("data-live") == "timing-chart"
    page.goto(server.url + "/handlers?handler=t.fail&hours=6")
    bar = page.locator("#timing-chart g.bar rect.failed")
    assert bar.count() in (1, 2)  # the two failures fell in one minute (or two)
    bars = page.locator("#timing-chart g.bar title").all_text_contents()
    assert bars and all("(100%)" in b for b in bars), bars  # all of them failed
    assert errors == []  # nothing refused by the CSP, no script error
