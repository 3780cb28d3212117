"""The dashboard's security model (issue 14 item 2) against a real server and a real browser,
on both backends: the token, CSRF, read-only, escaping, headers, loopback-only binding."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from daemon_util import Daemon, daemons_fixture, render_config
from util import free_tcp_port, python, subprocess_env, wait_until
from webutil import TOKEN, ServerFactory, csrf_of, write_config

from supervisor import Queue
from supervisor.dburl import parse_database_url
from supervisor.models import JobState
from supervisor.store import Store

OWNER = "web-host:4242:cafe"
daemons = daemons_fixture  # a real daemon fires the alert the pages show

HOSTILE = "<script>window.pwned = 1</script>"


def dead_job(
    queue: Queue, store: Store, handler: str = "report.build", name: str = "reports"
) -> int:
    job_id = queue.enqueue(handler, {"n": 1}, queue=name)
    assert store.claim(name, OWNER, 1, 60)[0].id == job_id
    assert store.fail(OWNER, job_id, "boom", dead=True)
    return job_id


def log_in(page: Any, url: str, token: str = TOKEN) -> None:
    page.goto(url + "/")
    page.fill("input[name=token]", token)
    with page.expect_navigation():
        page.get_by_role("button", name="log in").click()


# --- the token ---------------------------------------------------------------------------------


def test_with_a_token_every_page_and_api_needs_it(page: Any, web_server: ServerFactory) -> None:
    server = web_server(token=TOKEN)
    for path in ("/", "/jobs", "/dead", "/running", "/schedules", "/jobs/1"):
        response = page.goto(server.url + path)
        assert response.status == 401, path
        assert page.locator("input[name=token]").count() == 1  # the login form
        assert "Queues" not in page.inner_text("main")
    code, body, headers = server.request("/api/status")
    assert code == 401 and json.loads(body) == {"error": "authentication required"}
    assert headers["WWW-Authenticate"].startswith("Bearer")
    assert server.request("/api/status", headers={"Authorization": "Bearer wrong"})[0] == 401
    code, body, _ = server.request("/api/status", headers=server.bearer())
    assert code == 200 and "queues" in json.loads(body)
    code, _, _ = server.request("/queues/pause", data={"queue": "email"})
    assert code == 401


def test_the_login_page_does_not_show_the_database(
    page: Any, web_server: ServerFactory, db_url: str
) -> None:
    """Before login nothing about the deployment shows; after it, the database (redacted)."""
    shown = parse_database_url(db_url).redacted()
    server = web_server(token=TOKEN)
    for path in ("/", "/login", "/jobs/1"):
        page.goto(server.url + path)
        assert page.locator("input[name=token]").count() == 1, path
        assert shown not in page.content(), path
        assert page.locator(".db").count() == 0, path
    log_in(page, server.url)
    assert shown in page.inner_text("header .db")
    # A page read with the Bearer header has the same menu and header (they were left out),
    # and no logout button: there is no session to end.
    code, body, _ = server.request("/", headers=server.bearer())
    assert code == 200 and 'class="db"' in body and 'href="/jobs"' in body, body[:2000]
    assert "log out" not in body


def test_the_login_form_sets_an_httponly_samesite_strict_session(
    page: Any, web_server: ServerFactory
) -> None:
    server = web_server(token=TOKEN)
    log_in(page, server.url, token="not-the-token-at-all")
    assert "wrong token" in page.inner_text("main")
    log_in(page, server.url)
    assert page.locator("table#queues").count() == 1
    [cookie] = [c for c in page.context.cookies() if c["name"] == "forkq_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert TOKEN not in cookie["value"]
    with page.expect_navigation():
        page.get_by_role("button", name="log out").click()
    assert page.goto(server.url + "/").status == 401
    # The logged-out cookie, replayed (as someone who copied it would), logs in no more.
    page.context.add_cookies([{**cookie, "value": cookie["value"]}])
    assert page.goto(server.url + "/queues").status == 401


def test_a_forged_or_foreign_session_cookie_is_refused(
    page: Any, web_server: ServerFactory
) -> None:
    server = web_server(token=TOKEN)
    forged = "v1.abcdefabcdefabcdefabcdef.9999999999.1.c2lnbmF0dXJl"
    page.context.add_cookies([{"name": "forkq_session", "value": forged, "url": server.url}])
    assert page.goto(server.url + "/").status == 401


# --- CSRF ---------------------------------------------------------------------------------------


def test_an_action_without_or_with_a_wrong_csrf_token_is_refused(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    job_id = dead_job(queue, store)
    server = web_server(token=TOKEN)
    log_in(page, server.url)
    page.goto(f"{server.url}/jobs/{job_id}")
    page.eval_on_selector_all("input[name=csrf]", "inputs => inputs.forEach(i => i.value = 'x')")
    with page.expect_navigation():
        page.get_by_role("button", name="retry").click()
    assert "403" in page.inner_text("body") and "CSRF" in page.inner_text("body")
    page.goto(f"{server.url}/jobs/{job_id}")
    page.eval_on_selector_all("input[name=csrf]", "inputs => inputs.forEach(i => i.remove())")
    with page.expect_navigation():
        page.get_by_role("button", name="discard").click()
    assert "403" in page.inner_text("body")
    # The session cookie alone, as a cross-site form would carry it: still refused.
    response = page.request.post(f"{server.url}/dead/discard", form={"id": str(job_id)})
    assert response.status == 403
    response = page.request.post(f"{server.url}/queues/pause", form={"queue": "reports"})
    assert response.status == 403
    assert store.get_job(job_id).status == JobState.DEAD  # type: ignore[union-attr]
    assert store.paused_queues() == set()


def test_without_a_token_actions_still_need_the_csrf_token(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    job_id = dead_job(queue, store)
    server = web_server()
    page.goto(server.url + "/dead")
    token = csrf_of(page.content())
    wrong = page.request.post(f"{server.url}/dead/retry", form={"id": str(job_id), "csrf": "no"})
    assert wrong.status == 403 and store.get_job(job_id).status == JobState.DEAD  # type: ignore[union-attr]
    right = page.request.post(
        f"{server.url}/dead/retry", form={"id": str(job_id), "csrf": token}, max_redirects=0
    )
    assert right.status == 303 and store.get_job(job_id).status == JobState.READY  # type: ignore[union-attr]


def test_a_bearer_client_acts_without_a_csrf_token(
    web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    job_id = dead_job(queue, store)
    server = web_server(token=TOKEN)
    code, _, _ = server.request("/dead/retry", data={"id": str(job_id)}, headers=server.bearer())
    assert code == 303 and store.get_job(job_id).status == JobState.READY  # type: ignore[union-attr]


# --- read-only ---------------------------------------------------------------------------------


def test_read_only_hides_every_button_and_refuses_every_action(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    job_id = dead_job(queue, store)
    waiting = queue.enqueue("mail.send", {}, queue="email")
    server = web_server(read_only=True)
    for path in ("/", "/dead", "/queues", "/running", "/schedules", f"/jobs/{job_id}"):
        page.goto(server.url + path)
        assert page.locator("main form[method=post]").count() == 0, path
        assert "read-only" in page.inner_text("header")
    for path, form in (
        ("/dead/retry", {"id": str(job_id)}),
        ("/dead/discard", {"queue": "reports", "scope": "all"}),
        (f"/jobs/{waiting}/cancel", {}),
        ("/queues/pause", {"queue": "email"}),
        ("/schedules/run", {"schedule": "nightly"}),
    ):
        response = page.request.post(server.url + path, form={**form, "csrf": "anything"})
        assert response.status == 403 and "read-only" in response.text(), path
    assert store.get_job(job_id).status == JobState.DEAD  # type: ignore[union-attr]
    assert store.get_job(waiting).status == JobState.READY  # type: ignore[union-attr]
    assert store.paused_queues() == set() and store.list_jobs(queue="reports")[0].id == job_id


def test_read_only_from_the_config_file(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    job_id = dead_job(queue, store)
    server = web_server(extra="[web]\nread_only = true\n")
    page.goto(f"{server.url}/jobs/{job_id}")
    assert page.get_by_role("button", name="retry").count() == 0
    response = page.request.post(f"{server.url}/jobs/{job_id}/retry", form={"csrf": "x"})
    assert response.status == 403


# --- escaping ----------------------------------------------------------------------------------


def test_a_hostile_row_renders_as_text_everywhere(
    page: Any,
    web_server: ServerFactory,
    queue: Queue,
    store: Store,
    daemons: Callable[..., Daemon],
) -> None:
    name = "<b>q</b>"
    job_id = dead_job(queue, store, handler=HOSTILE, name=name)
    other = queue.enqueue(
        "mail.send", {"html": HOSTILE, "img": "<img src=x onerror=window.pwned=2>"}
    )
    queue.enqueue("report.build", {"n": 2}, queue=name)  # a backlog no pool works off
    daemon = daemons(name="alerting")  # its alert names the queue, from the row
    rules = f'\n[alerts]\n\n[alerts.rules."{name}"]\nmax_ready = 0\n'
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + rules)
    daemon.start().wait_ready()
    key = f"max_ready:{name}"
    wait_until(lambda: store.load_alerts().get(key), timeout=30, message="alert saved")
    server = web_server()
    for path in ("/", "/jobs", "/dead", f"/jobs/{job_id}", f"/jobs/{other}", "/alerts", "/queues"):
        page.goto(server.url + path)
        assert page.evaluate("window.pwned") is None, path
        assert page.locator("main b", has_text="q").count() == 0, path
        assert page.locator("main script, main img").count() == 0, path
    page.goto(f"{server.url}/jobs/{job_id}")
    assert HOSTILE in page.inner_text("table.fields")
    page.goto(f"{server.url}/jobs/{other}")
    assert HOSTILE in page.inner_text("pre.payload")
    page.goto(server.url + "/")
    assert f'queue "{name}" backlog' in page.inner_text(".alerts-firing")


def test_control_characters_and_bidi_marks_from_rows_show_as_escapes(
    web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    """As `forkq status` shows them: a queue named with a right-to-left override must not
    read as another name, nor an error hide its end; a traceback keeps its lines."""
    reversed_name = "safe\u202eeueuq-live"
    job_id = dead_job(queue, store, handler="mail.send", name=reversed_name)
    server = web_server()
    for path in ("/", "/queues", "/dead", f"/jobs/{job_id}"):
        html = server.request(path)[1]
        assert "\u202e" not in html and "safe\\u202eeueuq-live" in html, path
    error = "Traceback:\n  line one\x1b[2J\n  line two\u2066"
    noisy = queue.enqueue("mail.send", {}, queue="noisy")
    [row] = store.claim("noisy", "web-host:4242:cafe", 1, 60)
    assert row.id == noisy and store.fail("web-host:4242:cafe", noisy, error, dead=True)
    html = server.request(f"/jobs/{noisy}")[1]
    assert "\x1b" not in html and "\u2066" not in html
    assert "line one\\x1b[2J\n  line two\\u2066" in html


# --- headers, hosts, binding --------------------------------------------------------------------


def test_pages_carry_the_security_headers_and_are_never_stored(
    web_server: ServerFactory, queue: Queue
) -> None:
    job_id = queue.enqueue("mail.send", {"secret": "payload"})
    server = web_server()
    for path in ("/", f"/jobs/{job_id}", "/api/status"):
        code, _, headers = server.request(path)
        assert code == 200
        policy = headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy
        assert headers["X-Frame-Options"] == "DENY"
        assert headers["Referrer-Policy"] == "no-referrer"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Cache-Control"] == "no-store"


def test_without_a_token_only_loopback_host_names_are_answered(web_server: ServerFactory) -> None:
    server = web_server()
    assert server.request("/", headers={"Host": "evil.example"})[0] == 403  # DNS rebinding
    assert server.request("/api/status", headers={"Host": "attacker.test:8740"})[0] == 403
    # A path the router would redirect (merged slashes) was redirected to that host first.
    assert server.request("//jobs//42", headers={"Host": "evil.example"})[0] == 403
    assert server.request("/static/nothing.css", headers={"Host": "evil.example"})[0] == 403
    assert server.request("/", headers={"Host": "localhost"})[0] == 200
    token_server = web_server(token=TOKEN)
    code, _, _ = token_server.request(
        "/api/status", headers={"Host": "dash.example", **token_server.bearer()}
    )
    assert code == 200


def test_the_database_password_never_appears(
    page: Any, web_server: ServerFactory, db_url: str
) -> None:
    server = web_server()
    password = db_url.split("://", 1)[1].split("@", 1)[0].partition(":")[2] if "@" in db_url else ""
    for path in ("/", "/queues", "/processes", "/api/status"):
        _, body, _ = server.request(path)
        assert not password or f":{password}@" not in body
    if password:
        assert ":***@" in server.request("/")[1]


@pytest.mark.parametrize("listen", ["0.0.0.0:8740", "[::]:8740", "192.0.2.7:8740"])
def test_a_non_loopback_listen_without_a_token_exits_78(
    tmp_path: Any, db_url: str, listen: str
) -> None:
    config = write_config(tmp_path)
    env = subprocess_env(db_url)
    env.pop("FORKQ_WEB_TOKEN", None)
    result = subprocess.run(
        [python(), "-m", "supervisor", "web", "-c", str(config), "--listen", listen],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 78, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "FORKQ_WEB_TOKEN" in lines[0] and "Traceback" not in result.stderr


def test_a_short_token_is_refused_at_start(tmp_path: Any, db_url: str) -> None:
    config = write_config(tmp_path)
    env = subprocess_env(db_url, FORKQ_WEB_TOKEN="short")
    result = subprocess.run(
        [python(), "-m", "supervisor", "web", "-c", str(config), "--listen", "127.0.0.1:1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 78 and "at least 16 characters" in result.stderr


def test_a_database_url_on_the_command_line_is_not_in_ps(tmp_path: Any, db_url: str) -> None:
    """`forkq web --database URL` ran with its command line, the URL's password in it, for
    `ps` to show as long as the dashboard ran: it shows its title instead."""
    url = db_url
    if url.startswith("mysql://"):
        assert parse_database_url(url).password, "the test URL carries a password"
    config = write_config(tmp_path)
    env = subprocess_env(db_url, FORKQ_WEB_TOKEN=TOKEN)
    env.pop("FORKQ_DATABASE_URL")
    argv = [python(), "-m", "supervisor", "web", "-c", str(config), "--database", url]
    proc = subprocess.Popen(
        [*argv, "--listen", f"127.0.0.1:{free_tcp_port()}"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline")

        def titled() -> str:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode()
            return text if text.startswith("forkq: web") else ""

        shown = wait_until(titled, timeout=30, message="the dashboard's title")
        assert url not in shown and "--database" not in shown, shown
    finally:
        proc.terminate()
        proc.wait(timeout=30)
