"""Acting through the dashboard's pages, in a real browser, on both backends: retry, discard,
cancel, pause and resume change the database as the buttons say."""

from __future__ import annotations

from typing import Any

from webutil import ServerFactory

from supervisor import Queue
from supervisor.models import JobState
from supervisor.store import Store

OWNER = "web-host:4242:cafe"


def dead_jobs(queue: Queue, store: Store, count: int, name: str = "reports") -> list[int]:
    ids = [queue.enqueue("report.build", {"n": n}, queue=name) for n in range(count)]
    claimed = store.claim(name, OWNER, count, 60)
    assert sorted(r.id for r in claimed) == sorted(ids)
    for job_id in ids:
        assert store.fail(OWNER, job_id, "boom", dead=True)
    return ids


def status(store: Store, job_id: int) -> str | None:
    row = store.get_job(job_id)
    return None if row is None else str(row.status)


def click(page: Any, name: str, within: Any = None) -> None:
    """Press a button and wait for the page it leads to (a POST, then a 303 back)."""
    scope = within if within is not None else page
    with page.expect_navigation():
        scope.get_by_role("button", name=name, exact=True).first.click()


def test_retry_and_discard_one_dead_job_from_its_page(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    first, second = dead_jobs(queue, store, 2)
    server = web_server()
    page.goto(f"{server.url}/jobs/{first}")
    click(page, "retry")
    assert status(store, first) == JobState.READY
    assert f"job {first} will run again" in page.inner_text(".flash")
    page.goto(f"{server.url}/jobs/{second}")
    click(page, "discard")
    assert store.get_job(second) is None
    assert "discarded" in page.inner_text(".flash")
    assert page.url.split("?")[0].endswith("/dead")  # its own page is gone: the dead list
    assert "no job with id" not in page.inner_text("main")


def test_a_child_cancelled_while_waiting_is_not_retried_from_its_page(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    """Its parents are no longer recorded: retried, it would run before them. Its page
    offers no retry (a cancelled job without parents does), and a retry posted anyway
    (a page opened before) says why it was not done."""
    parent = queue.enqueue("report.build", queue="reports")
    child = queue.enqueue("report.mail", queue="reports", depends_on=[parent])
    alone = queue.enqueue("report.mail", queue="reports")
    assert store.cancel_jobs([child, alone], "test")[child].ok
    server = web_server()
    page.goto(f"{server.url}/jobs/{alone}")
    retry = page.locator("form", has=page.get_by_role("button", name="retry", exact=True))
    assert retry.count() == 1
    form_html = retry.first.evaluate("f => f.outerHTML").replace(
        f"/jobs/{alone}/", f"/jobs/{child}/"
    )
    page.goto(f"{server.url}/jobs/{child}")
    assert page.get_by_role("button", name="retry", exact=True).count() == 0
    page.evaluate("html => document.body.insertAdjacentHTML('beforeend', html)", form_html)
    click(page, "retry")
    assert status(store, child) == JobState.CANCELLED
    assert f"job {child} was not retried (cancelled with parents" in page.inner_text(".flash")


def test_retry_and_discard_a_selection_of_dead_jobs(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    ids = dead_jobs(queue, store, 4)
    server = web_server()
    page.goto(f"{server.url}/dead?queue=reports")
    for job_id in ids[:2]:
        page.check(f'input[name=id][value="{job_id}"]')
    click(page, "retry selected")
    assert [status(store, i) for i in ids] == ["ready", "ready", "dead", "dead"]
    assert "2 jobs will run again" in page.inner_text(".flash")
    page.check(f'input[name=id][value="{ids[3]}"]')
    click(page, "discard selected")
    assert store.get_job(ids[3]) is None and status(store, ids[2]) == "dead"


def test_select_all_then_retry_every_dead_job_on_the_page(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    ids = dead_jobs(queue, store, 3)
    server = web_server()
    page.goto(f"{server.url}/dead")
    page.check("input.select-all")
    click(page, "retry selected")
    assert [status(store, i) for i in ids] == ["ready"] * 3


def test_retry_all_and_discard_all_of_one_queue_leave_the_others(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    reports = dead_jobs(queue, store, 3)
    mail = dead_jobs(queue, store, 2, name="email")
    server = web_server()
    page.goto(f"{server.url}/dead")
    click(page, "retry all", within=page.locator("tr", has_text="reports"))
    assert [status(store, i) for i in reports] == ["ready"] * 3
    assert [status(store, i) for i in mail] == ["dead"] * 2
    click(page, "discard all", within=page.locator("tr", has_text="email"))
    assert [store.get_job(i) for i in mail] == [None, None]
    assert [status(store, i) for i in reports] == ["ready"] * 3


def test_retry_all_names_a_job_whose_unique_key_another_job_holds(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    """It stays dead, named with why, and is not counted: the others all run again."""
    held = queue.enqueue(
        "report.build", queue="reports", unique_key="nightly", unique_while="queued"
    )
    assert store.claim("reports", OWNER, 1, 60)[0].id == held
    assert store.fail(OWNER, held, "boom", dead=True)
    others = dead_jobs(queue, store, 3)
    holder = queue.enqueue(
        "report.build", queue="later", unique_key="nightly", unique_while="queued"
    )
    server = web_server()
    page.goto(f"{server.url}/dead")
    click(page, "retry all", within=page.locator("tr", has_text="reports"))
    assert [status(store, i) for i in others] == ["ready"] * 3
    assert status(store, held) == "dead"
    said = page.inner_text(".flash")
    assert "3 jobs will run again" in said, said
    assert f"left dead: job {held} (its unique key is held by job {holder})" in said, said
    page.goto(f"{server.url}/dead?queue=reports")
    page.check(f'input[name=id][value="{held}"]')
    click(page, "retry selected")
    said = page.inner_text(".flash")
    assert "0 jobs will run again" in said and f"left dead: job {held} (its unique" in said


def test_cancel_a_waiting_job_and_a_running_one(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    waiting = queue.enqueue("mail.send", {}, queue="email", delay=600)
    running = queue.enqueue("report.build", {}, queue="reports")
    assert store.claim("reports", OWNER, 1, 60)[0].id == running
    server = web_server()
    page.goto(f"{server.url}/jobs/{waiting}")
    click(page, "cancel")
    row = store.get_job(waiting)
    assert row is not None and row.status == JobState.CANCELLED
    assert row.last_error == "cancelled by the dashboard (127.0.0.1)"
    page.goto(f"{server.url}/running")
    click(page, "cancel", within=page.locator("tr", has_text="report.build"))
    row = store.get_job(running)
    assert row is not None and row.status == JobState.CANCELLING and row.locked_by == OWNER
    assert "stopped within 2 s" in page.inner_text(".flash")


def test_cancel_selected_running_jobs(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    ids = [queue.enqueue("report.build", {"n": n}, queue="reports") for n in range(3)]
    for _ in ids:  # one claim each: each job starts (a batch's later jobs are only claimed)
        store.claim("reports", OWNER, 1, 60)
    server = web_server()
    page.goto(f"{server.url}/running")
    page.check(f'input[name=id][value="{ids[0]}"]')
    page.check(f'input[name=id][value="{ids[2]}"]')
    click(page, "cancel selected")
    assert [status(store, i) for i in ids] == ["cancelling", "running", "cancelling"]


def test_pause_and_resume_a_queue_from_the_overview(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    queue.enqueue("mail.send", {}, queue="email")
    server = web_server()
    page.goto(server.url + "/")
    click(page, "pause", within=page.locator('tr[data-queue="email"]'))
    assert store.paused_queues() == {"email"}
    assert "paused" in page.locator('tr[data-queue="email"]').inner_text()
    click(page, "resume", within=page.locator('tr[data-queue="email"]'))
    assert store.paused_queues() == set()


def test_run_now_enqueues_one_job_as_the_schedule_would(
    page: Any, web_server: ServerFactory, store: Store
) -> None:
    server = web_server()
    page.goto(server.url + "/schedules")
    click(page, "run now")
    [job] = store.list_jobs(queue="reports")
    assert job.handler == "reports.nightly" and job.payload == '{"kind": "daily"}'
    assert f"job {job.id} enqueued" in page.inner_text(".flash")
    assert store.last_slot("nightly") is None  # an extra run, not a slot
