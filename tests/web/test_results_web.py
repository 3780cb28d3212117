"""The job page shows a kept result and the attempt history (issue 25 items 2 and 3, issue 26
item 7): a real daemon runs a job that fails twice, then succeeds and keeps its value; a
real browser reads the page (both backends)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import pytest
from daemon_util import Daemon, daemons_fixture, render_config  # noqa: F401
from webutil import ServerFactory

from supervisor import Queue

MODULE = """
from supervisor import handler

@handler("w.flaky", queue="work", keep_result=True, max_attempts=5, backoff_base=0, backoff_cap=0)
def flaky(payload, job):
    if job.attempts < 3:
        raise RuntimeError(f"upstream said 503 (attempt {job.attempts})")
    return {"rows": 4000, "by": "flaky", "note": "ünï ✓ <b>&"}
"""


@pytest.mark.parametrize("on_success", ["keep", "delete"])
def test_the_job_page_shows_the_kept_result_and_every_attempt(
    page: Any,
    web_server: ServerFactory,
    daemons: Callable[..., Daemon],
    queue: Queue,
    on_success: str,
) -> None:
    """With `on_success = "delete"` the row is gone and the result kept: the page shows
    what `forkq show` shows (the result, the recorded attempts), not a 404."""
    daemon = daemons(name="results", pools={"work": {"workers": 1, "on_success": on_success}})
    daemon.write_module("resulthandlers", MODULE)
    supervisor = {
        **daemon.supervisor,
        "handlers": [*daemon.supervisor["handlers"], "resulthandlers"],
    }
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, supervisor))
    daemon.start().wait_ready()
    job_id = queue.enqueue("w.flaky", {}, queue="work")
    kept = {"rows": 4000, "by": "flaky", "note": "ünï ✓ <b>&"}
    assert queue.wait(job_id, 60).value == kept

    server = web_server()
    response = page.goto(f"{server.url}/jobs/{job_id}")
    assert response.status == 200, page.inner_text("main")
    assert "done" in page.inner_text("h1")
    # As written: no \\u escapes of the letters or of <, > and & (and no markup either)
    shown = page.locator("table.fields td.result").inner_text()
    assert shown == '{"by": "flaky", "note": "ünï ✓ <b>&", "rows": 4000}', shown
    rows = page.locator("table.attempts tr.attempt")
    # A success writes no history: once the row is deleted, the failed attempts remain.
    shown = 3 if on_success == "keep" else 2
    assert rows.count() == shown
    cells = [rows.nth(i).locator("td").all_inner_texts() for i in range(shown)]
    assert [c[0] for c in cells] == ["1", "2", "3"][:shown]
    assert [c[1] for c in cells] == ["retry", "retry", "done"][:shown]
    assert cells[0][4] == cells[1][4] == socket.gethostname()
    assert cells[0][5].isdigit() and cells[1][5].isdigit()
    assert "upstream said 503 (attempt 1)" in cells[0][6]
    assert "upstream said 503 (attempt 2)" in cells[1][6]
