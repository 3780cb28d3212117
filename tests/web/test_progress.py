"""Progress: a Python handler's job.progress and a command's `forkq-progress:` stderr line,
reported by a real daemon while the jobs run, shown on the running page and the job page
(both backends, a real browser)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from daemon_util import Daemon, daemons_fixture, render_config  # noqa: F401
from util import wait_until
from webutil import ServerFactory

from supervisor import Queue
from supervisor.store import Store

MODULE = """
import os, time
from supervisor import handler

@handler("p.slow")
def slow(payload, job):
    job.progress(10, "starting")
    assert not job.progress(20, "too soon")  # at most one write a second
    time.sleep(1.1)
    job.progress(40, "rows 4,000 of 10,000")
    while not os.path.exists(payload["flag"]):
        time.sleep(0.05)
"""


def test_progress_of_a_handler_and_a_command_shows_on_the_running_and_job_pages(
    page: Any,
    web_server: ServerFactory,
    daemons: Callable[..., Daemon],
    queue: Queue,
    store: Store,
    tmp_path: Path,
) -> None:
    flag = tmp_path / "go"
    daemon = daemons(name="progress", pools={"work": {"workers": 2}})
    daemon.write_module("progresshandlers", MODULE)
    supervisor = {
        **daemon.supervisor,
        "handlers": [*daemon.supervisor["handlers"], "progresshandlers"],
    }
    script = (
        f"echo 'forkq-progress: 25 rows 2500/10000' >&2; while [ ! -e {flag} ]; do sleep 0.05; done"
    )
    command = f'\n[commands."c.slow"]\nargv = ["sh", "-c", "{script}"]\nqueue = "work"\n'
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, supervisor) + command)
    daemon.start().wait_ready()
    python_job = queue.enqueue("p.slow", {"flag": str(flag)}, queue="work")
    command_job = queue.enqueue("c.slow", {}, queue="work")

    def progress(job_id: int) -> str:
        row = store.get_job(job_id)
        return "" if row is None or row.progress is None else row.progress

    try:
        wait_until(lambda: "rows 4,000" in progress(python_job), timeout=30, message="python")
        wait_until(lambda: "2500/10000" in progress(command_job), timeout=30, message="command")
        server = web_server()
        page.goto(server.url + "/running")
        cells = page.locator("table.jobs td.progress").all_inner_texts()
        assert "40% rows 4,000 of 10,000" in cells and "25% rows 2500/10000" in cells, cells
        page.goto(f"{server.url}/jobs/{command_job}")
        assert page.locator("table.fields td.progress").inner_text() == "25% rows 2500/10000"
    finally:
        flag.touch()
    wait_until(
        lambda: all(
            (job := store.get_job(i)) is None or str(job.status) == "done"  # one read: gone or done
            for i in (python_job, command_job)
        ),
        timeout=30,
        message="jobs did not finish",
    )
