"""Alert channels against real servers on loopback, and the runner against a real store."""

from __future__ import annotations

import email
import email.policy
import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import structlog
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from supervisor import events
from supervisor.cluster.alerts.channels import (
    AlertRunner,
    deliver,
    redact_url,
    send_email,
    send_test,
    send_webhook,
)
from supervisor.cluster.alerts.states import Notification, Snapshot
from supervisor.config import AlertsConfig, build_config
from supervisor.models import QueueStats
from supervisor.store import Store, open_store

T0 = 1_700_000_000.0
COOLDOWN = 900.0
SMTP_USER, SMTP_PASSWORD = "forkq", "pw-Zq81-never-logged"


# --- a webhook receiver --------------------------------------------------------------------


class Hook(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), HookHandler)
        self.received: list[dict[str, Any]] = []
        self.requests = 0
        self.status = 200

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/T0001/B0002/Xs3cretT0ken?sig=qq77secret"

    def texts(self) -> list[str]:
        return [body["text"] for body in self.received]


class HookHandler(BaseHTTPRequestHandler):
    server: Hook

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.requests += 1
        if self.server.status == 200:
            assert self.headers["Content-Type"] == "application/json"
            self.server.received.append(json.loads(body))
        self.send_response(self.server.status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


# --- an SMTP receiver ----------------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], email.message.EmailMessage]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), parsed))  # type: ignore[arg-type]
        return "250 OK"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_password(
    server: Any, session: Any, envelope: Any, mechanism: str, data: Any
) -> AuthResult:
    ok = (
        isinstance(data, LoginPassword)
        and data.login == SMTP_USER.encode()
        and data.password == SMTP_PASSWORD.encode()
    )
    return AuthResult(success=ok, handled=False)


def start_smtp(sink: Sink, port: int | None = None, **params: Any) -> Controller:
    controller = Controller(sink, hostname="127.0.0.1", port=port or free_port(), **params)
    controller.start()
    return controller


@pytest.fixture
def smtp() -> Iterator[tuple[Sink, int]]:
    sink = Sink()
    controller = start_smtp(sink)
    yield sink, controller.port
    controller.stop()


def alerts_config(**values: Any) -> AlertsConfig:
    """Through build_config, as the daemon gets it (FORKQ_SMTP_PASSWORD read from the environment)."""
    return build_config({"alerts": values}, "test.toml").alerts


def mail_config(port: int, **values: Any) -> AlertsConfig:
    base = {
        "email_to": ["ops@example.com", "oncall@example.com"],
        "email_from": "forkq@app1.example.com",
        "smtp_host": "127.0.0.1",
        "smtp_port": port,
        "smtp_timeout": 2,
    }
    return alerts_config(**{**base, **values})


# --- webhook -------------------------------------------------------------------------------


def test_webhook_posts_slack_compatible_json(hook: Hook) -> None:
    result = send_webhook(hook.url, '[forkq] app1: queue "email" backlog 1523', 2.0)
    assert result.ok, result.error
    assert hook.received == [{"text": '[forkq] app1: queue "email" backlog 1523'}]


def test_webhook_error_status_is_an_error_without_the_secret(hook: Hook) -> None:
    hook.status = 500
    result = send_webhook(hook.url, "x", 2.0)
    assert not result.ok
    assert "500" in result.error
    assert result.error.startswith(f"http://127.0.0.1:{hook.server_address[1]}/…")
    assert (
        "s3cret" not in result.error and "qq77" not in result.error and "hooks" not in result.error
    )


def test_webhook_to_a_closed_port_fails_fast_and_never_raises() -> None:
    port = free_port()
    started = time.monotonic()
    result = send_webhook(f"http://127.0.0.1:{port}/hook/Xs3cretT0ken", "x", 2.0)
    assert not result.ok and "refused" in result.error.lower()
    assert "Xs3cret" not in result.error
    assert time.monotonic() - started < 2.0


def test_webhook_to_a_server_that_never_answers_times_out() -> None:
    with socket.socket() as silent:  # accepts connections (the kernel backlog) and never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        result = send_webhook(f"http://127.0.0.1:{silent.getsockname()[1]}/hook", "x", 0.5)
        elapsed = time.monotonic() - started
    assert not result.ok and "timed out" in result.error
    assert 0.4 < elapsed < 2.0


def test_webhook_refuses_other_schemes() -> None:
    result = send_webhook("file:///etc/passwd", "x", 1.0)
    assert not result.ok and "not an http(s) URL" in result.error


def test_redact_url_keeps_scheme_and_host_only() -> None:
    assert (
        redact_url("https://user:pw@hooks.example:8443/services/T/B/secret?x=1")
        == "https://hooks.example:8443/…"
    )


# --- email ---------------------------------------------------------------------------------


def test_email_is_received_with_from_to_subject_and_body(smtp: tuple[Sink, int]) -> None:
    sink, port = smtp
    result = send_email(mail_config(port), "[forkq] app1: queue backlog", "the body line\n")
    assert result.ok, result.error
    ((mail_from, rcpt, msg),) = sink.messages
    assert mail_from == "forkq@app1.example.com"
    assert rcpt == ["ops@example.com", "oncall@example.com"]
    assert msg["From"] == "forkq@app1.example.com"
    assert msg["To"] == "ops@example.com, oncall@example.com"
    assert msg["Subject"] == "[forkq] app1: queue backlog"
    assert msg.get_content().strip() == "the body line"


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_email_login_uses_the_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = Sink()
    controller = start_smtp(
        sink, authenticator=check_password, auth_require_tls=False, auth_required=True
    )
    try:
        monkeypatch.setenv("FORKQ_SMTP_PASSWORD", SMTP_PASSWORD)
        cfg = mail_config(controller.port, smtp_user=SMTP_USER)
        assert cfg.smtp_password == SMTP_PASSWORD and SMTP_PASSWORD not in repr(cfg)
        assert send_email(cfg, "s", "b").ok
        assert len(sink.messages) == 1
        monkeypatch.setenv("FORKQ_SMTP_PASSWORD", SMTP_PASSWORD + "-wrong")
        bad = send_email(mail_config(controller.port, smtp_user=SMTP_USER), "s", "b")
        assert not bad.ok and "535" in bad.error
        assert SMTP_PASSWORD not in bad.error
        monkeypatch.delenv("FORKQ_SMTP_PASSWORD")
        unset = send_email(mail_config(controller.port, smtp_user=SMTP_USER), "s", "b")
        assert not unset.ok and "FORKQ_SMTP_PASSWORD" in unset.error
        assert len(sink.messages) == 1
    finally:
        controller.stop()


@pytest.fixture
def tls_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, trusted by the default context via SSL_CERT_FILE."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    return cert, key


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_email_starttls_then_login(
    tls_files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = Sink()
    controller = start_smtp(
        sink,
        tls_context=server_context(*tls_files),
        require_starttls=True,
        authenticator=check_password,
    )  # auth_require_tls stays on: login only after STARTTLS
    try:
        monkeypatch.setenv("FORKQ_SMTP_PASSWORD", SMTP_PASSWORD)
        plain = send_email(mail_config(controller.port, smtp_user=SMTP_USER), "s", "b")
        assert not plain.ok  # the server insists on STARTTLS
        result = send_email(
            mail_config(controller.port, smtp_user=SMTP_USER, smtp_starttls=True), "s", "b"
        )
        assert result.ok, result.error
        assert len(sink.messages) == 1
    finally:
        controller.stop()


def test_email_on_port_465_uses_implicit_tls(tls_files: tuple[Path, Path]) -> None:
    sink = Sink()
    try:
        controller = start_smtp(
            sink, port=465, server_hostname="127.0.0.1", ssl_context=server_context(*tls_files)
        )
    except (OSError, RuntimeError) as exc:  # not root, or 465 taken
        pytest.skip(f"cannot listen on 127.0.0.1:465: {exc}")
    try:
        result = send_email(mail_config(465), "implicit", "tls")
        assert result.ok, result.error
        assert sink.messages[0][2]["Subject"] == "implicit"
    finally:
        controller.stop()


def test_email_to_an_unreachable_server_fails_within_the_timeout() -> None:
    assert not send_email(mail_config(free_port()), "s", "b").ok
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        started = time.monotonic()
        result = send_email(mail_config(silent.getsockname()[1], smtp_timeout=0.5), "s", "b")
        elapsed = time.monotonic() - started
    assert not result.ok and "timed out" in result.error
    assert elapsed < 2.0


# --- deliver and send_test -----------------------------------------------------------------


def test_send_test_goes_out_on_every_channel(hook: Hook, smtp: tuple[Sink, int]) -> None:
    sink, port = smtp
    results = send_test(mail_config(port, webhook_url=hook.url), "app1")
    assert [(r.channel, r.ok) for r in results] == [("webhook", True), ("email", True)]
    assert hook.texts() == ["[forkq] forkq test alert from app1"]
    assert "forkq test alert from app1" in sink.messages[0][2]["Subject"]


def test_send_test_without_channels_sends_nothing() -> None:
    assert send_test(AlertsConfig(), "app1") == []


def test_deliver_reports_each_channel_and_skips_the_ones_told_to(hook: Hook) -> None:
    cfg = mail_config(free_port(), webhook_url=hook.url, smtp_timeout=1)
    note = Notification("max_ready:email", "firing", "[forkq] app1: x")
    results = deliver(cfg, note)
    assert [(r.channel, r.ok) for r in results] == [("webhook", True), ("email", False)]
    results = deliver(cfg, note, skip={"email"})
    assert results[1].error.startswith("not tried")


# --- the runner against a real store -------------------------------------------------------


def backlog(ready: int, host: str = "app1") -> Snapshot:
    return Snapshot(
        host=host, queues=[QueueStats(queue="email", ready=ready, oldest_ready_age=60.0)]
    )


# As the webhook receives it: Slack's escaping turns `>` into `&gt;` (shown as `>`).
FIRING_LINE = 'queue "email" backlog 2000 ready &gt; max_ready 1000 (oldest waited 1m)'


def hook_config(hook: Hook) -> AlertsConfig:
    return alerts_config(webhook_url=hook.url, cooldown=COOLDOWN, defaults={"max_ready": 1000})


def test_two_hosts_sharing_a_database_send_one_message_per_cooldown(
    hook: Hook, db_url: str, store: Store
) -> None:
    cfg = hook_config(hook)
    other_store = open_store(db_url)
    hosts = [(AlertRunner(), store, "app1"), (AlertRunner(), other_store, "app2")]
    try:
        t = T0
        for _ in range(
            int(COOLDOWN // 10) + 1
        ):  # the chores lease passes back and forth every tick
            for runner, store, host in hosts:
                runner.run(store, cfg, backlog(2000, host), t)
                t += 5
        for runner, store, host in hosts * 3:
            runner.run(store, cfg, backlog(10, host), t)
            t += 5
    finally:
        other_store.close()
    texts = hook.texts()
    assert [text.split(": ", 2)[1] for text in texts] == [
        FIRING_LINE,
        "still firing (for 15m)",
        "resolved",
    ]
    assert texts[0].startswith("[forkq] app1: ")
    state = store.load_alerts()["max_ready:email"]
    assert state["state"] == "ok" and state["notified_at"] is not None


def test_a_failed_delivery_is_recorded_as_judged_and_retried_on_the_next_run(
    hook: Hook, store: Store
) -> None:
    """No channel took the firing message: the alert is stored firing all the same (the
    dashboard and /metrics read it; before, the old state was kept, so a down channel hid
    the alert), and the channel is owed the message until it takes it."""
    cfg = hook_config(hook)
    runner = AlertRunner()
    hook.status = 500
    assert runner.run(store, cfg, backlog(2000), T0) == []
    stored = store.load_alerts()["max_ready:email"]
    assert stored["state"] == "firing" and stored["since"] == pytest.approx(T0)
    assert stored["detail"]["owed"] == {"webhook": ["firing", stored["detail"]["text"]]}
    hook.status = 200
    sent = runner.run(store, cfg, backlog(2000), T0 + 10)
    assert [n.kind for n in sent] == ["firing"]
    assert hook.requests == 2 and len(hook.received) == 1
    assert runner.run(store, cfg, backlog(2000), T0 + 20) == []
    stored = store.load_alerts()["max_ready:email"]
    assert stored["since"] == pytest.approx(T0) and not stored["detail"].get("owed")
    assert stored["detail"]["sent_to"] == ["webhook"]  # the page: notified, not "never"


def test_a_failed_resolved_message_is_retried_too(hook: Hook, store: Store) -> None:
    cfg = hook_config(hook)
    runner = AlertRunner()
    runner.run(store, cfg, backlog(2000), T0)
    hook.status = 503
    assert runner.run(store, cfg, backlog(5), T0 + 10) == []
    assert store.load_alerts()["max_ready:email"]["state"] == "ok"  # as judged
    hook.status = 200
    assert [n.kind for n in runner.run(store, cfg, backlog(5), T0 + 20)] == ["resolved"]
    assert [t.split(": ")[1] for t in hook.texts()] == [FIRING_LINE, "resolved"]
    assert runner.run(store, cfg, backlog(5), T0 + 30) == []  # told once


def test_a_channel_that_missed_a_message_the_other_took_gets_it_later(
    hook: Hook, smtp: tuple[Sink, int], store: Store
) -> None:
    """The mail took the firing message, the webhook did not: the alert reads as told, so
    the rules never send it again; the webhook is owed it and gets it alone next tick."""
    sink, port = smtp
    cfg = mail_config(port, webhook_url=hook.url, cooldown=COOLDOWN, defaults={"max_ready": 1000})
    runner = AlertRunner()
    hook.status = 500
    assert [n.kind for n in runner.run(store, cfg, backlog(2000), T0)] == ["firing"]
    assert len(sink.messages) == 1 and hook.texts() == []
    with structlog.testing.capture_logs() as captured:  # still failing: said each try
        assert runner.run(store, cfg, backlog(2000), T0 + 5) == []
    failed = [e for e in captured if e["event"] == events.ALERT_SEND_FAILED]
    assert len(failed) == 1 and failed[0]["owed"] is True, captured
    assert list(failed[0]["errors"]) == ["webhook"], failed
    hook.status = 200
    paid = runner.run(store, cfg, backlog(2000), T0 + 10)  # nothing new: what it missed
    assert [n.kind for n in paid] == ["firing"]
    assert [t.split(": ")[1] for t in hook.texts()] == [FIRING_LINE]  # what it missed
    assert len(sink.messages) == 1  # the mail is not told twice
    runner.run(store, cfg, backlog(2000), T0 + 20)
    assert len(hook.texts()) == 1  # paid once
    hook.status = 503  # now it misses the resolved message: owed that, not the firing one
    assert [n.kind for n in runner.run(store, cfg, backlog(5), T0 + 30)] == ["resolved"]
    hook.status = 200
    runner.run(store, cfg, backlog(5), T0 + 40)
    assert [t.split(": ")[1] for t in hook.texts()] == [FIRING_LINE, "resolved"]
    assert len(sink.messages) == 2


def test_a_channel_added_while_an_alert_fires_hears_it_at_the_next_tick_and_its_end(
    hook: Hook, smtp: tuple[Sink, int], store: Store
) -> None:
    """A reload adds a channel: it is told of an alert still firing at the next tick (the
    one it missed, not a cooldown later), then of its end, as the other channel is.
    Also when no channel was configured when the alert fired."""
    sink, port = smtp
    rules = {"cooldown": COOLDOWN, "defaults": {"max_ready": 1000}}
    # Two rounds, the second long after the first resolved (a fresh alert, not a repeat)
    for t, first in (
        (T0, alerts_config(**rules)),
        (T0 + 10 * COOLDOWN, mail_config(port, **rules)),
    ):
        hook.received.clear()
        sink.messages.clear()
        runner = AlertRunner()
        assert [n.kind for n in runner.run(store, first, backlog(2000), t)] == ["firing"]
        both = mail_config(port, webhook_url=hook.url, **rules)
        missed = 1 if first.email_to else 2  # the webhook; and the mail, if it was not there
        paid = runner.run(store, both, backlog(2000), t + 10)
        assert [n.kind for n in paid] == ["firing"] * missed
        assert [text.split(": ")[1] for text in hook.texts()] == [FIRING_LINE]
        assert len(sink.messages) == 1  # one firing message each, whenever it came
        assert runner.run(store, both, backlog(2000), t + 20) == []  # told once
        assert [n.kind for n in runner.run(store, both, backlog(5), t + 30)] == ["resolved"]
        assert [text.split(": ")[1] for text in hook.texts()] == [FIRING_LINE, "resolved"]
        assert len(sink.messages) == 2 and store.load_alerts()["max_ready:email"]["state"] == "ok"


def test_a_channel_added_as_an_alert_ends_is_not_told_a_lone_resolved(
    hook: Hook, smtp: tuple[Sink, int], store: Store
) -> None:
    """ "resolved" goes where "firing" went: not to a webhook added as the backlog cleared."""
    sink, port = smtp
    rules = {"cooldown": COOLDOWN, "defaults": {"max_ready": 1000}}
    runner = AlertRunner()
    assert [n.kind for n in runner.run(store, mail_config(port, **rules), backlog(2000), T0)] == [
        "firing"
    ]
    both = mail_config(port, webhook_url=hook.url, **rules)
    assert [n.kind for n in runner.run(store, both, backlog(5), T0 + 10)] == ["resolved"]
    assert hook.texts() == [] and len(sink.messages) == 2


def test_database_outage_alerts_once_per_cooldown_per_host(hook: Hook, store: Store) -> None:
    cfg = hook_config(hook)
    down = open_store(f"mysql://root@127.0.0.1:{free_port()}/forkq", timeout=2)
    app1, app2 = AlertRunner(), AlertRunner()
    for t in range(0, int(COOLDOWN), 60):
        app1.run(
            down, cfg, Snapshot("app1", [], db_error="database unreachable: (2003) refused"), T0 + t
        )
        app2.run(
            down, cfg, Snapshot("app2", []), T0 + t
        )  # the master did not notice; loading states did
    texts = hook.texts()
    assert sorted(text.split(": ")[0] for text in texts) == ["[forkq] app1", "[forkq] app2"]
    assert all("database unreachable" in text for text in texts)
    assert "database unreachable: database unreachable" not in texts[0]
    app1.run(down, cfg, Snapshot("app1", [], db_error="still down"), T0 + COOLDOWN)
    assert "still firing" in hook.texts()[-1]
    # the database is back: one resolved message per host, and the state is written down
    sent = app1.run(store, cfg, backlog(5), T0 + COOLDOWN + 10)
    assert [(n.key, n.kind) for n in sent] == [("db_unreachable:app1", "resolved")]
    assert app1.run(store, cfg, backlog(5), T0 + COOLDOWN + 20) == []
    assert store.load_alerts()["db_unreachable:app1"]["state"] == "ok"
    assert [
        (n.key, n.kind) for n in app2.run(store, cfg, backlog(5, "app2"), T0 + COOLDOWN + 30)
    ] == [("db_unreachable:app2", "resolved")]


def test_without_channels_alerts_are_still_judged_and_recorded(store: Store) -> None:
    cfg = alerts_config(cooldown=COOLDOWN, defaults={"max_ready": 1000})
    runner = AlertRunner()
    assert [n.kind for n in runner.run(store, cfg, backlog(2000), T0)] == ["firing"]
    assert runner.run(store, cfg, backlog(2000), T0 + 10) == []
    assert store.load_alerts()["max_ready:email"]["state"] == "firing"
