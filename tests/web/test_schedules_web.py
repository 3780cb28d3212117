"""The schedules page adds, pauses, resumes and removes schedules at runtime, in a real
browser on both backends; the file's schedules are refused with the reason, and CSRF and
read-only hold for the new actions."""

from __future__ import annotations

from typing import Any

from webutil import ServerFactory

from supervisor.config import schedule_from
from supervisor.store import Store


def click(page: Any, name: str, within: Any = None) -> None:
    scope = within if within is not None else page
    with page.expect_navigation():
        scope.get_by_role("button", name=name, exact=True).first.click()


def test_a_schedule_is_added_paused_resumed_and_removed_from_the_page(
    page: Any, web_server: ServerFactory, store: Store
) -> None:
    server = web_server()
    page.goto(server.url + "/schedules")
    form = page.locator("form.add-schedule")
    form.locator("input[name=name]").fill("cleanup")
    form.locator("input[name=cron]").fill("*/15 * * * *")
    form.locator("input[name=handler]").fill("maint.cleanup")
    form.locator("input[name=queue]").fill("maint")
    form.locator("input[name=payload]").fill('{"days": 30}')
    click(page, "add", within=form)
    flash = page.inner_text(".flash")
    assert "schedule cleanup added" in flash
    # As `forkq schedule add` warns (the config here registers no handler, and no pool
    # serves the queue).
    assert "registers 'maint.cleanup': a worker ends each of its jobs dead" in flash
    assert "serves queue 'maint': each of its jobs waits until a [pools.maint]" in flash
    (added,) = store.runtime_schedules()
    assert (added.name, added.cron, added.handler, added.queue) == (
        "cleanup",
        "*/15 * * * *",
        "maint.cleanup",
        "maint",
    )
    assert dict(added.payload) == {"days": 30} and (added.changed_by or "").startswith(
        "the dashboard"
    )
    section = page.locator('section[data-schedule="cleanup"]')
    assert "Added at runtime" in section.inner_text()
    assert section.locator("li").count() >= 5  # its next runs, computed like the file's

    click(page, "pause", within=section)
    assert "schedule cleanup paused" in page.inner_text(".flash")
    assert store.runtime_schedules()[0].paused
    assert "paused" in page.locator('section[data-schedule="cleanup"] h2').inner_text()
    click(page, "resume", within=page.locator('section[data-schedule="cleanup"]'))
    assert not store.runtime_schedules()[0].paused
    click(page, "remove", within=page.locator('section[data-schedule="cleanup"]'))
    assert "schedule cleanup removed" in page.inner_text(".flash")
    assert store.runtime_schedules() == []
    assert page.locator('section[data-schedule="cleanup"]').count() == 0


def test_the_files_schedule_and_a_bad_one_are_refused_with_the_reason(
    page: Any, web_server: ServerFactory, store: Store
) -> None:
    server = web_server()
    page.goto(server.url + "/schedules")
    nightly = page.locator('section[data-schedule="nightly"]')
    assert "edit the file" in nightly.inner_text()
    assert nightly.get_by_role("button", name="pause").count() == 0
    form = page.locator("form.add-schedule")
    form.locator("input[name=name]").fill("nightly")
    form.locator("input[name=cron]").fill("* * * * *")
    form.locator("input[name=handler]").fill("reports.nightly")
    click(page, "add", within=form)
    flash = page.inner_text(".flash")
    assert (
        "schedule not added" in flash
        and "is defined in" in flash
        and "[schedules.nightly]" in flash
    )
    form = page.locator("form.add-schedule")
    form.locator("input[name=name]").fill("bad")
    form.locator("input[name=cron]").fill("not cron")
    form.locator("input[name=handler]").fill("reports.nightly")
    click(page, "add", within=form)
    assert "not a valid cron expression" in page.inner_text(".flash")
    # A forged pause of the file's schedule (the page offers none) is refused with the reason.
    token = page.locator("form.add-schedule input[name=csrf]").input_value()
    response = page.request.post(
        server.url + "/schedules/pause", form={"schedule": "nightly", "csrf": token}
    )
    assert response.ok and "not done" in response.text() and "is defined in" in response.text()
    assert store.runtime_schedules() == []


def test_schedule_actions_need_csrf_and_are_refused_read_only(
    page: Any, web_server: ServerFactory, store: Store
) -> None:
    store.add_schedule(schedule_from("kept", {"cron": "0 * * * *", "handler": "x.y"}), by="t")
    server = web_server()
    page.goto(server.url + "/schedules")
    for path in ("/schedules/add", "/schedules/pause", "/schedules/remove"):
        form = {"schedule": "kept", "name": "new", "cron": "* * * * *", "handler": "x.y"}
        assert page.request.post(server.url + path, form=form).status == 403, path
    server.stop()
    server = web_server(read_only=True)
    page.goto(server.url + "/schedules")
    assert page.locator("main form").count() == 0
    assert "kept" in page.inner_text("main")
    for path in ("/schedules/add", "/schedules/pause", "/schedules/remove"):
        form = {"schedule": "kept", "name": "new", "cron": "* * * * *", "handler": "x.y"}
        response = page.request.post(server.url + path, form={**form, "csrf": "anything"})
        assert response.status == 403 and "read-only" in response.text(), path
    (kept,) = store.runtime_schedules()
    assert kept.name == "kept" and not kept.paused
