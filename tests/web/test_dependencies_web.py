"""Dependencies on the dashboard (SPEC "Composing jobs"), in a real browser: a job's page
links its parents and dependents, a waiting job wears its own badge and can be cancelled
(its chain with it), and the overview says how many jobs of a queue wait on parents."""

from __future__ import annotations

from typing import Any

from webutil import ServerFactory

from supervisor import Queue
from supervisor.store import Store


def test_a_waiting_job_shows_its_parents_and_cancelling_it_cancels_its_chain(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    first, second, third = queue.chain([queue.job("mail.send", queue="email")] * 3)
    server = web_server()
    page.goto(f"{server.url}/jobs/{second}")
    assert page.inner_text("h1 .status") == "waiting"
    assert page.eval_on_selector("h1 .status", "e => e.className") == "status s-waiting"
    assert page.inner_text("td.parents").split() == [str(first)]
    assert page.inner_text("td.dependents").split() == [str(third)]
    page.click("td.parents a")
    assert page.url.endswith(f"/jobs/{first}")
    assert page.locator("td.parents").count() == 0  # the head of the chain waits on nothing

    page.goto(server.url + "/")
    assert page.get_attribute('tr[data-queue="email"] [data-waiting]', "data-waiting") == "2"

    page.goto(f"{server.url}/jobs/{second}")
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('cancel')")
    page.wait_for_load_state()
    assert [store.get_job(i).status for i in (first, second, third)] == [  # type: ignore[union-attr]
        "ready",
        "cancelled",
        "cancelled",
    ]
