"""The alerts page on both backends: an alert a real `forkq run` fired and then resolved reads
as resolved (its state, when it resolved, what resolved), never with its firing message as
if the condition still held; that message is kept beside it, marked as past."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest
from daemon_util import Daemon, daemons_fixture, render_config
from private_mariadb import Webhook
from util import free_tcp_port, python, subprocess_env, wait_until
from webutil import ServerFactory

from supervisor import Queue
from supervisor.store import Store
from supervisor.web.alerts_page import resolved_text

daemons = daemons_fixture  # the real daemon that fires and resolves the alert

KEY = "max_ready:stuck"
FIRING = 'queue "stuck" backlog 3 ready > max_ready 1'


@pytest.mark.parametrize("channel", ["none", "webhook", "down"])
def test_a_resolved_alert_reads_as_resolved(
    page: Any,
    web_server: ServerFactory,
    daemons: Callable[..., Daemon],
    queue: Queue,
    store: Store,
    db_url: str,
    channel: str,
) -> None:
    """max_ready crossed by real enqueues (no pool serves "stuck"), then the backlog
    cancelled with `forkq cancel`: the daemon resolves the alert on its next tick. With
    no channel configured nothing was notified, and the page says so (not a time). With
    the only channel down the alert is recorded all the same (it was not, while no
    channel took its message: the page and /metrics showed nothing firing), and the page
    says which channel has not taken it."""
    ids = [queue.enqueue("t.noop", {"n": n}, queue="stuck") for n in range(3)]
    daemon = daemons(name="alerting")
    hook = Webhook() if channel == "webhook" else None
    where = f'webhook_url = "{hook.url}"\n' if hook else ""
    if channel == "down":  # a port nothing listens on
        where = f'webhook_url = "http://127.0.0.1:{free_tcp_port()}/hook"\n'
    rules = f"\n[alerts]\n{where}\n[alerts.rules.stuck]\nmax_ready = 1\n"
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + rules)
    try:
        daemon.start().wait_ready()
        wait_until(lambda: state(store) == "firing", timeout=30, message="alert firing")
        server = web_server()
        page.goto(server.url + "/alerts")
        assert FIRING in page.locator(f'tr[data-alert="{KEY}"] .message').inner_text()
        notified = page.locator(f'tr[data-alert="{KEY}"] .notified').inner_text()
        if channel == "none":
            assert notified == "never: no alert channel is configured", notified
        elif channel == "down":
            assert notified.startswith("never") and "not taken yet by webhook" in notified
        else:
            assert hook is not None and notified.startswith("20") and "ago" in notified
            assert any("backlog 3 ready" in text for text in hook.texts), hook.texts
        _resolved(page, server.url, ids, store, db_url)
    finally:
        if hook is not None:
            hook.close()


def test_a_firing_alert_reads_as_its_figure_now_and_says_when_nobody_judges_it(
    page: Any, web_server: ServerFactory, daemons: Callable[..., Daemon], queue: Queue,
    store: Store,
) -> None:  # fmt: skip
    """The backlog grows after the alert fired: the page shows today's figure (each tick
    keeps it), with the message that was sent beside it. Once the daemon is stopped no
    tick judges it: after three check intervals the page and the overview say since when
    (a firing alert no daemon looks at any more would otherwise read as current)."""
    for n in range(3):
        queue.enqueue("t.noop", {"n": n}, queue="stuck")
    daemon = daemons(name="alerting", supervisor={"check_interval": 1})
    rules = '\n[alerts]\ncooldown = "1h"\n\n[alerts.rules.stuck]\nmax_ready = 1\n'
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + rules)
    daemon.start().wait_ready()
    wait_until(lambda: state(store) == "firing", timeout=30, message="alert firing")
    for n in range(3, 5):
        queue.enqueue("t.noop", {"n": n}, queue="stuck")
    wait_until(
        lambda: "backlog 5 ready" in str(store.load_alerts()[KEY]["detail"].get("current")),
        timeout=30,
        message="the figure of a later tick",
    )
    server = web_server(supervisor="check_interval = 1")
    page.goto(server.url + "/alerts")
    row = page.locator(f'tr[data-alert="{KEY}"]')
    assert 'queue "stuck" backlog 5 ready > max_ready 1' in row.locator(".message").inner_text()
    assert "backlog 3 ready" in row.locator(".said").inner_text()  # what was sent, beside it
    assert row.locator(".unjudged").count() == 0
    assert daemon.stop() == 0, daemon.describe()
    time.sleep(3.5)  # three check intervals of the dashboard's config, and a margin
    page.goto(server.url + "/alerts")
    assert "not judged since" in row.locator(".unjudged").inner_text()
    page.goto(server.url + "/")
    assert "not judged since" in page.locator(".alerts-firing").inner_text()


def _resolved(page: Any, url: str, ids: list[int], store: Store, db_url: str) -> None:
    """The backlog cancelled: the page reads the alert as resolved."""
    argv = [python(), "-m", "supervisor", "cancel", *map(str, ids)]
    subprocess.run(argv, env=subprocess_env(db_url), check=True, capture_output=True, timeout=60)
    wait_until(lambda: state(store) == "ok", timeout=30, message="alert resolved")
    page.goto(url + "/alerts")
    row = page.locator(f'tr[data-alert="{KEY}"]')
    message = row.locator(".message").inner_text()
    assert message.endswith(': resolved: queue "stuck" backlog 0 ready <= 1'), message  # as sent
    assert "> max_ready" not in message
    assert row.locator(".state").inner_text() == "resolved"
    assert row.locator(".since").inner_text().startswith("resolved since ")
    assert row.locator(".fired").inner_text().startswith("when it fired: ")
    assert FIRING in row.locator(".fired").inner_text()  # what was said, marked as past
    assert "firing" not in (row.get_attribute("class") or "").split()
    page.goto(url + "/")
    assert page.locator(".alerts-firing").count() == 0  # nothing fires any more


def state(store: Store) -> str | None:
    """The alert's state as the daemon saved it."""
    row = store.load_alerts().get(KEY)
    return None if row is None else str(row["state"])


def test_every_rule_resolves_in_its_own_words() -> None:
    """The keys the rules make (cluster/alerts/states.py): queue rules name the queue,
    host rules their host as their messages do; a key of no known rule is shown as is."""
    assert resolved_text("max_age:email") == (
        'resolved: queue "email" oldest ready job no longer over max_age'
    )
    assert resolved_text("max_dead:email") == (
        'resolved: queue "email" new dead jobs no longer over max_dead'
    )
    assert resolved_text("saturated:app1:email") == (
        '[forkq] app1: resolved: pool "email" no longer saturated'
    )
    assert resolved_text("crash_loop:app1:email") == (
        '[forkq] app1: resolved: pool "email" workers start normally again'
    )
    assert (
        resolved_text("db_unreachable:app1") == "[forkq] app1: resolved: database reachable again"
    )
    assert resolved_text("someday:x") == "resolved: someday:x"
    assert resolved_text("max_ready") == "resolved: max_ready"
