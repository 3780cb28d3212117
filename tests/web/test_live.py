"""The live dashboard, in a real browser on both backends: a job enqueued while the page is
open appears without a reload; the toggle and a hidden tab stop the refreshes."""

from __future__ import annotations

from typing import Any

from util import wait_until
from webutil import ServerFactory

from supervisor import Queue

LIVE_PERIOD = 5.0  # dashboard.js's LIVE_PERIOD


def ready_cell(page: Any, queue: str) -> Any:
    return page.locator(f'tr[data-queue="{queue}"] td[data-count="ready"]')


def test_a_job_enqueued_while_the_page_is_open_appears_without_a_reload(
    page: Any, web_server: ServerFactory, queue: Queue
) -> None:
    server = web_server()
    page.goto(server.url + "/")
    assert page.locator("#live-toggle").is_checked()
    page.evaluate("window.forkqTestMark = 'the same page'")  # gone if the page reloads
    queue.enqueue("mail.send", {}, queue="live1")
    page.wait_for_selector('tr[data-queue="live1"]', timeout=20_000)
    assert ready_cell(page, "live1").inner_text() == "1"
    queue.enqueue("mail.send", {}, queue="live1")
    wait_until(lambda: ready_cell(page, "live1").inner_text() == "2", timeout=20, message="count")
    assert page.evaluate("window.forkqTestMark") == "the same page"
    assert "updated" in page.inner_text("header .live-stamp")
    assert page.locator('[data-live="chart"] svg').count() == 1  # the chart is swapped in too


def test_the_toggle_and_a_hidden_tab_stop_the_refreshes(
    page: Any, web_server: ServerFactory, queue: Queue
) -> None:
    server = web_server()
    page.goto(server.url + "/")
    fetches: list[str] = []
    page.on("request", lambda r: fetches.append(r.url) if "x-forkq-live" in r.headers else None)
    page.locator("#live-toggle").uncheck()
    page.wait_for_timeout(1000)  # a refresh already under way ends
    seen = len(fetches)
    queue.enqueue("mail.send", {}, queue="live2")
    # past a whole period (Playwright delivers events meanwhile)
    page.wait_for_timeout(1.5 * LIVE_PERIOD * 1000)
    assert len(fetches) == seen, "refreshed while switched off"
    assert page.locator('tr[data-queue="live2"]').count() == 0
    page.reload()  # the choice is kept
    assert not page.locator("#live-toggle").is_checked()
    page.locator("#live-toggle").check()
    page.wait_for_selector('tr[data-queue="live2"]', timeout=20_000)

    page.evaluate(
        """() => {
        Object.defineProperty(document, "visibilityState", {value: "hidden", configurable: true});
        document.dispatchEvent(new Event("visibilitychange"));
    }"""
    )
    page.wait_for_timeout(1000)
    seen = len(fetches)
    queue.enqueue("mail.send", {}, queue="live3")
    page.wait_for_timeout(1.5 * LIVE_PERIOD * 1000)
    assert len(fetches) == seen, "refreshed while the tab was hidden"
    assert page.locator('tr[data-queue="live3"]').count() == 0
    page.evaluate(
        """() => {
        Object.defineProperty(document, "visibilityState", {value: "visible", configurable: true});
        document.dispatchEvent(new Event("visibilitychange"));
    }"""
    )
    page.wait_for_selector('tr[data-queue="live3"]', timeout=20_000)  # caught up when shown
