"""The dashboard over two databases, each served by its own real `forkq run` (a config of
that database alone), on both backends: the processes and running pages show each
database's own, and cancelling a running job of the second stops it there alone."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from daemon_util import Daemon, daemons_fixture  # noqa: F401 (fixture)
from databases_util import (
    databases_toml,
    reports_url_fixture,  # noqa: F401  (the `reports_url` fixture)
)
from util import wait_until
from webutil import TOKEN, ServerFactory

from supervisor import Queue
from supervisor.store import Store, open_store


def pids_shown(html: str) -> set[int]:
    return {int(p) for p in re.findall(r'<td class="num">(\d+)</td>', html)}


def test_processes_and_running_jobs_of_each_database(
    daemons: Callable[..., Daemon],
    web_server: ServerFactory,
    db_url: str,
    reports_url: str,
    tmp_path: Path,
) -> None:
    home = daemons(name="home", pools={"email": {"workers": 1}}).start().wait_ready()
    reports = daemons(name="rep", db_url=reports_url, pools={"reports": {"workers": 1}})
    reports.start().wait_ready()
    home_queue, reports_queue = Queue(db_url, wake=False), Queue(reports_url, wake=False)
    home_job = home_queue.enqueue("t.sleep", {"seconds": 60}, queue="email")
    report_job = reports_queue.enqueue("t.sleep", {"seconds": 60}, queue="reports")
    server = web_server(token=TOKEN, extra=databases_toml(reports_url))
    auth = server.bearer()

    def running(path: str, ref: str) -> bool:
        return f'href="/jobs/{ref}"' in server.request(path, headers=auth)[1]

    wait_until(lambda: running("/running?db=reports", f"reports:{report_job}"), timeout=30)
    wait_until(lambda: running("/running", str(home_job)), timeout=30)
    assert f"/jobs/reports:{report_job}" not in server.request("/running", headers=auth)[1]

    home_pids = set(home.pool_children("email"))
    reports_pids = set(reports.pool_children("reports"))
    shown_home = pids_shown(server.request("/processes", headers=auth)[1])
    shown_reports = pids_shown(server.request("/processes?db=reports", headers=auth)[1])
    assert home_pids <= shown_home and not reports_pids & shown_home
    assert reports_pids <= shown_reports and not home_pids & shown_reports

    code, _, headers = server.request(
        f"/jobs/reports:{report_job}/cancel", data={"next": "/running?db=reports"}, headers=auth
    )
    assert code == 303 and headers["Location"].endswith("/running?db=reports")
    store: Store = open_store(reports_url)
    home_store: Store = open_store(db_url)
    try:
        wait_until(
            lambda: str(store.get_job(report_job).status) == "cancelled",  # type: ignore[union-attr]
            timeout=30,
            message="the reports job cancelled by its daemon",
        )
        assert str(home_store.get_job(home_job).status) == "running"  # type: ignore[union-attr]
    finally:
        store.close()
        home_store.close()
        home_queue.close()
        reports_queue.close()
