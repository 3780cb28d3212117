"""The longest names forkq takes (a 64-character queue, a 191-character handler) wrap in
their cells: no page grows wider than a 1280-pixel window (a real daemon timed the
handler, a real browser lays the pages out; both backends)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from daemon_util import Daemon, daemons_fixture, render_config  # noqa: F401
from util import wait_until
from webutil import ServerFactory

from supervisor import Queue
from supervisor.store import Store
from supervisor.timing import merge

QUEUE = "q" * 64
HANDLER = "h" * 191


def test_the_longest_names_wrap_inside_a_1280_pixel_window(
    page: Any,
    web_server: ServerFactory,
    daemons: Callable[..., Daemon],
    queue: Queue,
    store: Store,
) -> None:
    daemon = daemons(name="long", pools={QUEUE: {"workers": 1}})
    daemon.write_module(
        "longhandlers",
        f"from supervisor import handler\n\n@handler({HANDLER!r}, queue={QUEUE!r})\n"
        "def work(payload, job):\n    pass\n",
    )
    supervisor = {**daemon.supervisor, "handlers": [*daemon.supervisor["handlers"], "longhandlers"]}
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, supervisor))
    daemon.start().wait_ready()
    queue.enqueue_many([{"handler": HANDLER, "payload": {}, "queue": QUEUE}] * 3)
    wait_until(
        lambda: merge(store.handler_stats(3600)).get(HANDLER) is not None,
        timeout=30,
        message=f"the handler timed ({daemon.describe()})",
    )
    queue.enqueue("never.registered", {}, queue=QUEUE, delay=3600)  # a row on /jobs too
    server = web_server()
    for path in ("/", "/queues", "/jobs", "/handlers", f"/handlers?handler={HANDLER}"):
        page.goto(server.url + path)
        assert HANDLER in page.content() or QUEUE in page.content(), path
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 1280, (path, width)
