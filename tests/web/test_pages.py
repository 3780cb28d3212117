"""The dashboard's pages in a real browser against a real `forkq web`, on both backends: what
they show is what the database holds, and what `forkq status --json` says."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from daemon_util import Daemon, daemons_fixture, render_config
from util import backend_of, sql, wait_until
from webutil import ServerFactory, forkq_json

from supervisor import Queue
from supervisor.building import build_job
from supervisor.dburl import parse_database_url
from supervisor.store import Store

daemons = daemons_fixture  # the real daemon that fires the alerts

OWNER = "web-host:4242:cafe"  # a lease holder with a process row


def populate(queue: Queue, store: Store) -> dict[str, int]:
    """Jobs in every state the overview counts, in two queues, one of them paused."""
    ids = {f"ready{n}": queue.enqueue("mail.send", {"n": n}, queue="email") for n in range(3)}
    for n in range(2):
        ids[f"later{n}"] = queue.enqueue("mail.send", {"n": n}, queue="email", delay=3600)
    ids["running"] = queue.enqueue("report.build", {"id": 7}, queue="reports")
    ids["dead"] = queue.enqueue("report.build", {"id": 8}, queue="reports")
    [first, second] = store.claim("reports", OWNER, 2, 60)
    assert {first.id, second.id} == {ids["running"], ids["dead"]}
    assert store.fail(OWNER, ids["dead"], "Traceback: it broke\nValueError: bad", dead=True)
    store.register_process(OWNER, "web-host", 4242, "worker", pool="reports")
    store.set_paused("reports", True)
    return ids


def overview_counts(page: Any) -> dict[str, dict[str, str]]:
    return page.eval_on_selector_all(
        "tr[data-queue]",
        """rows => Object.fromEntries(rows.map(row => [row.dataset.queue, Object.fromEntries(
            [...row.querySelectorAll('[data-count]')].map(c => [c.dataset.count, c.textContent.trim()])
        )]))""",
    )


def test_overview_counts_equal_forkq_status_json(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store, db_url: str
) -> None:
    populate(queue, store)
    server = web_server()
    status = forkq_json(db_url, server.config, "status")
    page.goto(server.url + "/")
    shown = overview_counts(page)
    assert set(shown) == {q["queue"] for q in status["queues"]} == {"email", "reports"}
    for q in status["queues"]:
        counts = ("ready", "delayed", "running", "dead", "done", "cancelled")
        expected = {k: str(q[k]) for k in counts}
        assert shown[q["queue"]] == expected
        row = page.locator(f'tr[data-queue="{q["queue"]}"]')
        assert ("paused" in row.inner_text()) == q["paused"]
    assert shown["email"]["ready"] == "3" and shown["email"]["delayed"] == "2"
    assert shown["reports"]["running"] == "1" and shown["reports"]["dead"] == "1"


def test_api_status_is_what_forkq_status_json_prints(
    web_server: ServerFactory, queue: Queue, store: Store, db_url: str
) -> None:
    populate(queue, store)
    server = web_server()
    code, body, headers = server.request("/api/status")
    cli = forkq_json(db_url, server.config, "status")
    api = json.loads(body)
    assert code == 200 and headers["Content-Type"].startswith("application/json")
    ages = []
    for document in (api, cli):  # ages move on between the two reads
        for process in document["processes"]:
            process.pop("heartbeat_age")
        ages.append([q.pop("oldest_ready_age") for q in document["queues"]])
    assert api == cli
    assert all(abs(a - b) < 60 for a, b in zip(*ages, strict=True))
    assert api["database"] == parse_database_url(db_url).redacted()  # never the password


def test_jobs_filter_by_queue_status_and_handler_and_find_by_id_or_key(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    ids = populate(queue, store)
    keyed = queue.enqueue("mail.send", {"to": "a@example.com"}, queue="email", unique_key="w-42")
    server = web_server()
    page.goto(server.url + "/jobs")
    page.fill("input[name=handler]", "report.build")
    page.get_by_role("button", name="filter").click()
    page.wait_for_url("**handler=report.build**")
    shown = page.eval_on_selector_all(
        "table.jobs tbody td.num a", "links => links.map(a => a.textContent)"
    )
    assert shown == [str(ids["dead"]), str(ids["running"])]  # newest first
    page.goto(server.url + "/jobs?status=scheduled&queue=email")
    shown = page.eval_on_selector_all(
        "table.jobs tbody td.num a", "links => links.map(a => a.textContent)"
    )
    assert shown == [str(ids["later1"]), str(ids["later0"])]
    page.goto(server.url + "/jobs")
    page.fill("input[name=find]", "w-42")
    page.get_by_role("button", name="go").click()
    page.wait_for_url(f"**/jobs/{keyed}")
    assert page.url.endswith(f"/jobs/{keyed}")
    page.goto(server.url + f"/jobs?find={ids['ready1']}")
    assert page.url.endswith(f"/jobs/{ids['ready1']}")
    page.goto(server.url + "/jobs?find=no-such-key")
    assert "no job with id or unique key" in page.inner_text("main")


def test_a_jobs_page_shows_payload_error_attempts_and_where_it_runs(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    ids = populate(queue, store)
    server = web_server()
    page.goto(server.url + f"/jobs/{ids['running']}")
    text = page.inner_text("main")
    assert "host web-host, pid 4242" in " ".join(text.split()).replace("—", "")
    assert '"id": 7' in page.inner_text("pre.payload")  # pretty-printed JSON
    page.goto(server.url + f"/jobs/{ids['dead']}")
    assert "ValueError: bad" in page.inner_text("pre.error-text")
    assert "1 of" in page.inner_text("table.fields")  # attempts
    assert page.goto(server.url + "/jobs/999999").status == 404


def test_running_page_lists_running_jobs_with_host_and_pid(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    ids = populate(queue, store)
    server = web_server()
    page.goto(server.url + "/running")
    row = page.locator("table.jobs tbody tr", has_text=str(ids["running"]))
    assert "web-host" in row.inner_text() and "4242" in row.inner_text()


def test_chart_sums_the_throughput_table_per_minute_over_hosts(
    page: Any, web_server: ServerFactory, store: Store, db_url: str
) -> None:
    minute = (int(store.db_now()) // 60 - 5) * 60
    at = "FROM_UNIXTIME(?)" if backend_of(db_url) == "mysql" else "?"
    rows = [(minute, "email", "app1", 30, 2), (minute, "email", "app2", 12, 1)]
    rows += [(minute - 120, "reports", "app1", 5, 0), (minute - 7 * 3600, "email", "app1", 99, 9)]
    for row in rows:
        sql(db_url, f"INSERT INTO forkq_throughput VALUES ({at}, ?, ?, ?, ?)", row)
    server = web_server()
    page.goto(server.url + "/?hours=3")
    caption = page.inner_text("figure.chart figcaption")
    assert "47 done, 3 failed" in caption  # the 7-hour-old row is out of range
    titles = page.eval_on_selector_all("svg .bar title", "ts => ts.map(t => t.textContent)")
    assert any(t.endswith("42 done, 3 failed") for t in titles), titles
    page.goto(server.url + "/?hours=3&queue=reports")
    assert "5 done, 0 failed" in page.inner_text("figure.chart figcaption")
    page.goto(server.url + "/?hours=12")
    assert "146 done, 12 failed" in page.inner_text("figure.chart figcaption")


def test_processes_alerts_locks_and_schedules_pages(
    page: Any, web_server: ServerFactory, store: Store, queue: Queue
) -> None:
    store.register_process("far-host:9:beef", "far-host", 9, "master")
    assert store.try_lock("nightly-export", "far-host:9:beef", 300)
    job_id = queue.enqueue("reports.nightly", {"kind": "daily"}, queue="reports")
    assert store.enqueue_slot("nightly", 1_700_000_000.0, _job()) is not None
    server = web_server()
    page.goto(server.url + "/processes")
    assert "far-host" in page.inner_text("table.processes")
    page.goto(server.url + "/locks")
    assert "nightly-export" in page.inner_text("table.locks") and "held" in page.inner_text(
        "table.locks"
    )
    page.goto(server.url + "/schedules")
    text = page.inner_text("section.schedule")
    assert "0 4 * * *" in text and "Asia/Tokyo" in text
    assert text.count("UTC (in ") == 5  # the next five runs
    assert "2023-11-14 22:13:20 UTC" in text  # the slot enqueued above
    assert job_id


def test_an_alert_a_real_daemon_fires_shows_on_the_overview_and_alerts_pages(
    page: Any,
    web_server: ServerFactory,
    daemons: Callable[..., Daemon],
    queue: Queue,
    store: Store,
) -> None:
    """The alert's row is the daemon's own: a max_ready rule crossed by real enqueues (no
    pool serves "stuck", so its backlog stays) and no channel configured."""
    for n in range(3):
        queue.enqueue("t.noop", {"n": n}, queue="stuck")
    daemon = daemons(name="alerting")
    rules = "\n[alerts]\n\n[alerts.rules.stuck]\nmax_ready = 1\n"
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + rules)
    daemon.start().wait_ready()
    wait_until(
        lambda: store.load_alerts().get("max_ready:stuck"), timeout=30, message="alert saved"
    )
    server = web_server()
    page.goto(server.url + "/alerts")
    assert "max_ready:stuck" in page.inner_text("table.alerts")
    assert "firing" in page.inner_text("table.alerts")
    row = page.locator('tr[data-alert="max_ready:stuck"]')  # in words: message, since, notified
    assert 'queue "stuck" backlog 3 ready > max_ready 1' in row.locator(".message").inner_text()
    assert row.locator(".since").inner_text().startswith("firing since ")
    # No channel is configured: nothing was announced, and the page says so.
    assert row.locator(".notified").inner_text() == "never: no alert channel is configured"
    # The rule is its key; the rules' own memory (announced, seen, epoch stamps) is not
    # the operator's to read.
    assert row.locator(".rule").inner_text() == "max_ready:stuck"
    response = page.goto(server.url + "/")
    assert response.status == 200, page.content()[:2000]
    firing = page.inner_text(".alerts-firing")
    assert "max_ready:stuck" in firing
    assert 'queue "stuck" backlog 3 ready > max_ready 1' in firing, firing


def _job() -> Any:
    return build_job("reports.nightly", {}, "reports", 0.0, None, 0, None, None)


def test_a_queue_no_pool_serves_is_not_shown_active(
    page: Any, web_server: ServerFactory, queue: Queue
) -> None:
    """The config's only pool is `email`: a job on `reports` waits for ever, and the
    overview and the queues page say that no pool serves it (issue 21.15)."""
    queue.enqueue("mail.send", {}, queue="email")
    queue.enqueue("report.build", {}, queue="reports")
    server = web_server()
    for path in ("/", "/queues"):
        page.goto(server.url + path)
        reports = page.locator('tr[data-queue="reports"]').inner_text()
        email = page.locator('tr[data-queue="email"]').inner_text()
        assert "no pool serves it" in reports and "active" not in reports, (path, reports)
        assert "active" in email and "no pool" not in email, (path, email)


def test_the_dead_page_says_when_each_job_died_and_attempts_read_1_of_n(
    page: Any, web_server: ServerFactory, store: Store, queue: Queue
) -> None:
    job_id = queue.enqueue("report.build", {}, queue="reports", max_attempts=3)
    assert [r.id for r in store.claim("reports", "web-host:1:cafe", 1, 60)] == [job_id]
    assert store.fail("web-host:1:cafe", job_id, "boom", dead=True)
    died = store.get_job(job_id).finished_at  # type: ignore[union-attr]
    assert died is not None
    server = web_server()
    page.goto(server.url + "/dead")
    headers = page.locator("table.jobs thead th").all_inner_texts()
    assert "Died at" in headers
    assert page.locator("table.jobs td.died").inner_text() == died.strftime("%Y-%m-%d %H:%M:%S UTC")
    assert page.locator("table.jobs td.attempts").inner_text() == "1 of 3"


def test_attempts_read_the_handler_s_default_where_the_row_leaves_it_null(
    store: Store, queue: Queue
) -> None:
    """The pages' "N of M" (filters.most_attempts): the row's max_attempts, else what the
    daemon gives the job, its handler's (the config's modules are imported), else default."""
    from supervisor import registry
    from supervisor.web.filters import most_attempts

    # Enqueued where the handler's module is not imported (a PHP app, another service):
    # the row's max_attempts is NULL.
    ids = [queue.enqueue("web.five_tries"), queue.enqueue("web.nobody")]
    ids.append(queue.enqueue("web.five_tries", max_attempts=3))
    registry.handler("web.five_tries", max_attempts=5)(lambda payload, job: None)
    try:
        rows = [store.get_job(job_id) for job_id in ids]
        assert [most_attempts(row) for row in rows if row] == ["5 (default)", "default", "3"]
    finally:
        registry._HANDLERS.pop("web.five_tries", None)
