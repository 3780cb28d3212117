"""The jobs page's search, in a real browser on both backends: payload.KEY:VALUE, error:,
tag:, handler:, queue:, over the newest 10,000 jobs (said on the page); tags given at
enqueue through the API, enqueue_many, the CLI and a raw INSERT."""

from __future__ import annotations

import subprocess
from typing import Any
from urllib.parse import quote

from util import python, sql, subprocess_env
from webutil import ServerFactory

from supervisor import Queue
from supervisor.store import Store

OWNER = "web-host:4242:cafe"


def dead(queue: Queue, store: Store, handler: str, error: str) -> int:
    job_id = queue.enqueue(handler, {"n": 1}, queue="errs")
    assert [r.id for r in store.claim("errs", OWNER, 1, 60)] == [job_id]
    assert store.fail(OWNER, job_id, error, dead=True)
    return job_id


def found(page: Any, server_url: str, query: str) -> list[int]:
    response = page.goto(f"{server_url}/jobs?q={quote(query)}")
    assert response.status == 200, page.inner_text("main")
    assert page.inner_text(".search-window").startswith("Searched ")
    cells = page.locator("table.jobs tbody td.num a").all_inner_texts()
    return sorted(int(c) for c in cells)


def test_search_finds_by_payload_error_tag_handler_and_queue(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store, db_url: str
) -> None:
    alice = queue.enqueue("mail.send", {"user_id": 42, "who": {"name": "ann"}}, tags=["billing"])
    bob = queue.enqueue("mail.send", {"user_id": 43}, queue="other", tags=["billing", "eu"])
    batch = queue.enqueue_many(
        [
            {"handler": "report.build", "payload": {"user_id": "42"}, "tags": ["reports"]},
            {"handler": "report.build", "payload": {"user_id": 7}},
        ]
    )
    timeout = dead(queue, store, "net.fetch", "TimeoutError: read timed out after 30 s")
    other = dead(queue, store, "net.fetch", "ValueError: 100% wrong")
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload, tags) VALUES (?, ?, ?, ?)",
        ("default", "php.job", "{not json", '["billing"]'),
    )
    raw = int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])
    env = subprocess_env(db_url)
    argv = [python(), "-m", "supervisor", "enqueue", "cli.job", '{"user_id": 42}']
    subprocess.run([*argv, "--tag", "cli", "--tag", "billing"], env=env, check=True)
    cli = int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])

    server = web_server()
    url = server.url
    assert found(page, url, "payload.user_id:42") == sorted([alice, batch[0], cli])
    # Every job is in the window: nothing is said to be left unsearched.
    assert page.inner_text(".search-window") == "Searched every job."
    assert found(page, url, "payload.who.name:ann") == [alice]
    assert found(page, url, "tag:billing") == sorted([alice, bob, raw, cli])
    assert found(page, url, "tag:billing queue:other") == [bob]
    assert found(page, url, "tag:reports handler:report.build") == [batch[0]]
    assert found(page, url, "error:timeout") == [timeout]  # case-insensitive
    assert found(page, url, 'error:"100% wrong"') == [other]  # % is a character, not a wildcard
    assert found(page, url, "error:%") == [other]
    assert found(page, url, "payload.user_id:999") == []
    page.goto(f"{url}/jobs/{cli}")
    assert page.locator("td.tags").inner_text().split() == ["cli", "billing"]
    with page.expect_navigation():
        page.locator("td.tags a", has_text="cli").click()
    assert page.locator("table.jobs tbody td.num a").all_inner_texts() == [str(cli)]
    # A tag with a quote or a backslash: its link's search was "unbalanced quotes".
    odd = queue.enqueue("mail.send", {}, tags=['x"y', "end\\", "it's"])
    for tag in ('x"y', "end\\", "it's"):
        page.goto(f"{url}/jobs/{odd}")
        with page.expect_navigation():
            page.locator("td.tags a", has_text=tag).click()
        assert page.locator("table.jobs tbody td.num a").all_inner_texts() == [str(odd)], tag


def test_a_bad_search_says_why_and_the_window_is_bounded(
    page: Any, web_server: ServerFactory, queue: Queue
) -> None:
    old = queue.enqueue("mail.send", {"user_id": 1})
    queue.enqueue_many([{"handler": "t.noop", "payload": {"n": n}} for n in range(10_000)])
    new = queue.enqueue("mail.send", {"user_id": 1})
    server = web_server()
    assert found(page, server.url, "payload.user_id:1") == [new]  # `old` is out of the window
    assert "Searched the newest 10,000 jobs" in page.inner_text(".search-window")
    for query, said in (
        ("payload.a/b:1", "keys are letters, digits"),
        ("nonsense", "expected NAME:VALUE"),
        ("colour:red", "'colour'"),
        ('error:"open', "unbalanced quotes"),
    ):
        response = page.goto(f"{server.url}/jobs?q={quote(query)}")
        assert response.status == 400 and said in page.inner_text("main"), query
    assert old < new


def test_an_unknown_status_is_named_with_the_statuses_there_are(
    page: Any, web_server: ServerFactory, queue: Queue, store: Store
) -> None:
    """`status:bogus` (and `?status=bogus`, the filter's own) say that no such status is,
    and which are; a name given twice says so: never a silent "no jobs"."""
    job_id = dead(queue, store, "net.fetch", "boom")
    server = web_server()
    statuses = "waiting, ready, scheduled, running, done, dead, cancelling, cancelled"
    for path in (
        f"/jobs?q={quote('status:bogus')}",
        f"/jobs?q={quote('queue:errs status:bogus')}",
        "/jobs?status=bogus",
        "/jobs?status=bogus&queue=errs",
    ):
        response = page.goto(server.url + path)
        text = page.inner_text("main")
        assert response.status == 400, (path, text)
        assert f"unknown status 'bogus': the statuses are {statuses}" in text, (path, text)
        assert "no jobs" not in text, path
    for query, said in (
        ("tag:a tag:b", "'tag:b': a second tag term"),
        ("payload.n:1 payload.m:2", "'payload.m:2': a second payload.KEY term"),
    ):
        response = page.goto(f"{server.url}/jobs?q={quote(query)}")
        assert response.status == 400 and said in page.inner_text("main"), query
    assert found(page, server.url, "status:dead") == [job_id]
