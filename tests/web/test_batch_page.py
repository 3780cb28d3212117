"""The dashboard's batch page (a real browser), with state a real daemon made: counts,
callbacks with links to their jobs, the jobs still in the table, and the link from a
job's page to its batch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from batch_util import callback_runs, with_batch_handlers
from daemon_util import Daemon, daemons_fixture  # noqa: F401
from util import wait_until
from webutil import ServerFactory

from supervisor import Queue


def test_the_batch_page_shows_what_a_daemon_did_and_a_job_page_links_to_it(
    page: Any,
    web_server: ServerFactory,
    daemons: Callable[..., Daemon],
    queue: Queue,
    tmp_path: Path,
) -> None:
    calls = tmp_path / "callbacks.txt"
    daemon = with_batch_handlers(daemons(name="batchweb", pools={"default": {"workers": 2}}))
    daemon.start().wait_ready()
    with queue.batch(on_success="b.callback", on_complete="b.callback", on_dead="b.callback",
                     payload={"file": str(calls)}) as batch:  # fmt: skip
        batch.enqueue_many([{"handler": "t.noop"}] * 3)
        dead = batch.enqueue("t.fail", max_attempts=1)
    wait_until(lambda: len(callback_runs(calls)) >= 2, timeout=30, message="callbacks ran")
    status = queue.batch_status(batch.id or 0)
    assert status is not None and set(status.fired) == {"complete", "dead"}
    server = web_server()
    page.goto(f"{server.url}/jobs/{dead}")
    page.locator("table.fields a", has_text=f"batch {batch.id}").click()
    assert page.url == f"{server.url}/batches/{batch.id}"
    assert page.locator("#batch-state").inner_text() == "settled"
    counts = {k: page.locator(f"#batch-{k}").inner_text() for k in ("total", "done", "dead")}
    assert counts == {"total": "4", "done": "3", "dead": "1"}
    rows = page.locator("#batch-callbacks tr").all_inner_texts()
    assert any("on_success" in r and "not enqueued" in r for r in rows), rows
    page.locator("#batch-callbacks a", has_text=f"job {status.fired['dead']}").click()
    assert page.url == f"{server.url}/jobs/{status.fired['dead']}"
    page.go_back()
    jobs = page.locator("#batch-jobs tr").all_inner_texts()
    assert any(str(dead) in r and "dead" in r for r in jobs), jobs  # deleted done jobs are not
    attempts = page.locator("#batch-jobs td.attempts").all_inner_texts()
    assert attempts == ["1 of 1"], attempts  # as on every page: of how many it is given
    assert page.goto(f"{server.url}/batches/999999").status == 404
