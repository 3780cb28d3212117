"""Alert channels (a Slack-compatible webhook, email over SMTP) and the glue the master runs.

Every call here is made by the master, which has no threads and must keep ticking, so
every network call has a short timeout and nothing raises to the caller: a channel that
fails becomes a `ChannelResult` with an error. Errors never carry a secret: the webhook
URL is shown as scheme://host/… (its path and query are often the secret) and the
SMTP password is masked wherever it might appear.
"""

from __future__ import annotations

import json
import smtplib
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, replace
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any
from urllib.parse import urlsplit

from supervisor import events, logs
from supervisor.cluster.alerts.owed import introduce, owe, pay
from supervisor.cluster.alerts.rules import evaluate
from supervisor.cluster.alerts.states import AlertState, Notification, Snapshot, is_host_key
from supervisor.config import AlertsConfig
from supervisor.errors import DatabaseError
from supervisor.escaping import for_chat, for_header, for_terminal, lines_for_terminal
from supervisor.store import Store

WEBHOOK, EMAIL = "webhook", "email"
_database: str | None = None  # a master of several databases: the one its alerts are about
REPLY_BYTES = 65536  # read at most this much of a webhook's answer


@dataclass(frozen=True)
class ChannelResult:
    channel: str  # "webhook" | "email"
    ok: bool
    error: str = ""


def redact_url(url: str) -> str:
    """scheme://host[:port]/… : enough to tell which endpoint failed, never the token in it."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        host = parts.hostname or "?"
    except ValueError:
        return "<invalid url>"
    return f"{parts.scheme or '?'}://{host}{port}/…"


def _scrub(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def _reason(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        exc = exc.reason if isinstance(exc.reason, BaseException) else Exception(str(exc.reason))
    if isinstance(exc, TimeoutError | socket.timeout):
        return "timed out"
    return f"{type(exc).__name__}: {exc}".strip().rstrip(":")


def send_webhook(url: str, text: str, timeout: float) -> ChannelResult:
    """POST {"text": text} as JSON; any 2xx answer is success."""
    target = redact_url(url)
    parts = urlsplit(url)
    secrets = (url, parts.path if parts.path != "/" else "", parts.query, parts.password or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ChannelResult(WEBHOOK, False, f"{target}: not an http(s) URL")
    request = urllib.request.Request(  # noqa: S310 - http(s) checked above
        url,
        data=json.dumps({"text": for_chat(text)}).encode("utf-8"),
        headers={"Content-Type": "application/json", "User-Agent": "forkq"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - http(s) checked above
            response.read(REPLY_BYTES)
            status = int(response.status)
    except Exception as exc:  # never raise to the master: report the channel as failed
        if isinstance(exc, urllib.error.HTTPError):
            exc.close()
        return ChannelResult(WEBHOOK, False, _scrub(f"{target}: {_reason(exc)}", secrets))
    if not 200 <= status < 300:
        return ChannelResult(WEBHOOK, False, f"{target}: HTTP {status}")
    return ChannelResult(WEBHOOK, True)


def send_email(cfg: AlertsConfig, subject: str, text: str) -> ChannelResult:
    """One message to every `email_to`: implicit TLS on port 465, STARTTLS when asked, login when
    `smtp_user` is set (password from FORKQ_SMTP_PASSWORD only)."""
    target = f"smtp {cfg.smtp_host}:{cfg.smtp_port}"
    try:
        message = _message(cfg, subject, text)
        with _smtp(cfg) as smtp:
            if cfg.smtp_starttls and cfg.smtp_port != 465:
                smtp.starttls(context=ssl.create_default_context())
            if cfg.smtp_user:
                smtp.login(cfg.smtp_user, cfg.smtp_password)
            smtp.send_message(message)
    except Exception as exc:  # never raise to the master: report the channel as failed
        hint = " (is FORKQ_SMTP_PASSWORD set?)" if cfg.smtp_user and not cfg.smtp_password else ""
        return ChannelResult(
            EMAIL, False, _scrub(f"{target}: {_reason(exc)}{hint}", [cfg.smtp_password])
        )
    return ChannelResult(EMAIL, True)


def _smtp(cfg: AlertsConfig) -> smtplib.SMTP:
    # local_hostname given, so smtplib does not call socket.getfqdn(), a DNS lookup with no timeout.
    local = socket.gethostname()
    if cfg.smtp_port == 465:
        context = ssl.create_default_context()
        return smtplib.SMTP_SSL(
            cfg.smtp_host, cfg.smtp_port, local, timeout=cfg.smtp_timeout, context=context
        )
    return smtplib.SMTP(cfg.smtp_host, cfg.smtp_port, local, timeout=cfg.smtp_timeout)


def _message(cfg: AlertsConfig, subject: str, text: str) -> EmailMessage:
    host = socket.gethostname()
    message = EmailMessage()
    message["From"] = cfg.email_from or f"forkq@{host}"
    message["To"] = ", ".join(cfg.email_to)
    message["Subject"] = for_header(subject)
    message["Date"] = formatdate(localtime=True)
    message["Message-ID"] = make_msgid("forkq", domain=host)  # domain given: no getfqdn()
    # Plain text; line breaks only where forkq put them (a name from a row is escaped).
    message.set_content("\n".join(lines_for_terminal(text.rstrip("\n"))) + "\n")
    return message


def channels(cfg: AlertsConfig) -> list[str]:
    """The channels this config sends on."""
    return ([WEBHOOK] if cfg.webhook_url else []) + ([EMAIL] if cfg.email_to else [])


def name_database(name: str) -> None:
    """Alerts from here on say which database they are about: "[forkq NAME] host: ..."."""
    global _database
    _database = name


def deliver(
    cfg: AlertsConfig, notification: Notification, skip: Iterable[str] = ()
) -> list[ChannelResult]:
    """Send one message on every configured channel; `skip` names channels not to try this time
    (they already failed this tick, so they are not given another timeout to wait out)."""
    if _database is not None and notification.text.startswith("[forkq] "):
        text = f"[forkq {_database}] {notification.text.removeprefix('[forkq] ')}"
        notification = replace(notification, text=text)
    skipped = set(skip)
    results = []
    for channel in channels(cfg):
        if channel in skipped:
            results.append(ChannelResult(channel, False, "not tried: it failed earlier this tick"))
        elif channel == WEBHOOK:
            results.append(send_webhook(cfg.webhook_url, notification.text, cfg.webhook_timeout))
        else:
            # The text and key come from rows (queue names): one escaped line each.
            text, key = for_terminal(notification.text), for_terminal(notification.key)
            body = f"{text}\n\nalert: {key} ({notification.kind})\n"
            results.append(send_email(cfg, for_header(notification.text), body))
    return results


def send_test(cfg: AlertsConfig, host: str) -> list[ChannelResult]:
    """One test message on every channel (`forkq alerts test`); [] when none is configured."""
    note = Notification("test", "firing", f"[forkq] forkq test alert from {host}")
    return deliver(cfg, note)


class AlertRunner:
    """Judges alerts on each check tick and sends what they say; the master keeps one.

    States live in the database so the cluster shares them (the host that holds the
    chores lease judges the queue rules; the next holder carries on where it left).
    This host's own rules are also kept in memory: when the database is unreachable
    the states cannot be read, yet that is exactly when an alert must go out, once
    per cooldown from each host that sees it.
    """

    def __init__(self) -> None:
        self.memory: dict[str, AlertState] = {}
        self.states: dict[str, AlertState] = {}  # every key after the last run (metrics)

    @property
    def log(self) -> Any:
        """Bound per use: a logger bound before `logs.setup()` would keep the default config."""
        return logs.get(component="alerts")

    def run(
        self, store: Store, cfg: AlertsConfig, snapshot: Snapshot, now: float
    ) -> list[Notification]:
        """One tick: load, judge, send, save. Returns the messages that went out.

        `now` should be the database clock (`store.db_now()`) when it can be read, so
        hosts with skewed clocks agree on cooldowns.
        """
        states: dict[str, AlertState]
        error: str | None
        if snapshot.db_error is not None:  # known unreachable: a load would only block
            states, error = dict(self.memory), snapshot.db_error
        else:
            states, error = self._load(store, snapshot.host)
        if error is not None and snapshot.db_error is None:
            snapshot = replace(snapshot, queues=[], db_error=error)
        new, notes = evaluate(snapshot, cfg, states, now)
        introduce(new, {n.key for n in notes}, set(channels(cfg)))
        sent = self._send(cfg, notes, new)
        self.states = new
        self.memory = {k: v for k, v in new.items() if is_host_key(k, snapshot.host)}
        if error is None:
            self._save(store, states, new)
        return sent

    def _load(self, store: Store, host: str) -> tuple[dict[str, AlertState], str | None]:
        """The states to judge from, and the database error if they could not be read."""
        try:
            rows = store.load_alerts()
        except DatabaseError as exc:
            self.log.warning(events.ALERT_STATES_UNAVAILABLE, error=str(exc)[:300])
            return dict(self.memory), str(exc) or type(exc).__name__
        states = {key: AlertState.from_store(row) for key, row in rows.items()}
        # This host's own keys: memory wins, it saw what the database could not record.
        states.update({k: v for k, v in self.memory.items() if is_host_key(k, host)})
        return states, None

    def _send(
        self,
        cfg: AlertsConfig,
        notes: list[Notification],
        new: dict[str, AlertState],
    ) -> list[Notification]:
        sent: list[Notification] = []
        failed: set[str] = set()
        for note in notes:
            results = deliver(_heard_it(cfg, note, new.get(note.key)), note, skip=failed)
            errors = {r.channel: r.error for r in results if not r.ok}
            failed.update(errors)
            if results and len(errors) == len(results):
                self.log.warning(
                    events.ALERT_SEND_FAILED,
                    key=note.key,
                    kind=note.kind,
                    text=note.text,
                    errors=errors,
                )
                _untold(new, note, errors)
                continue
            if errors:
                self.log.warning(
                    events.ALERT_SEND_FAILED,
                    key=note.key,
                    kind=note.kind,
                    errors=errors,
                    partial=True,
                )
            owe(new, note, errors)  # those channels get it on a later tick (owed.py)
            sent_on = [r.channel for r in results if r.ok]
            if note.key in new:  # who heard it: none when no channel is configured (the page)
                state = new[note.key]
                new[note.key] = replace(state, detail={**state.detail, "sent_to": sent_on})
            if sent_on:  # with no channel configured it went nowhere: no line says it was sent
                event = events.ALERT_RESOLVED if note.kind == "resolved" else events.ALERT_SENT
                self.log.info(event, key=note.key, kind=note.kind, text=note.text, channels=sent_on)
            sent.append(note)
        return sent + self._pay_owed(cfg, new, {n.key for n in notes}, failed)

    def _pay_owed(
        self, cfg: AlertsConfig, new: dict[str, AlertState], told: set[str], failed: set[str]
    ) -> list[Notification]:
        """What a channel missed that another took, to that channel alone (owed.py)."""
        configured = set(channels(cfg))

        def send(note: Notification, channel: str) -> bool:
            results = deliver(cfg, note, skip=configured - {channel})
            if any(r.ok for r in results if r.channel == channel):
                return True
            errors = {r.channel: r.error for r in results if r.channel == channel}  # still owed
            self.log.warning(events.ALERT_SEND_FAILED, key=note.key, kind=note.kind,
                             errors=errors, owed=True)  # fmt: skip
            return False

        paid = pay(new, told, configured, failed, send)
        for note, channel in paid:
            self.log.info(events.ALERT_SENT, key=note.key, kind=note.kind, text=note.text,
                          channels=[channel], owed=True)  # fmt: skip
        return [note for note, _ in paid]

    def _save(self, store: Store, old: dict[str, AlertState], new: dict[str, AlertState]) -> None:
        for key, state in new.items():
            if old.get(key) == state:
                continue
            try:
                store.save_alert(key, state.state, state.detail, state.since, state.notified_at)
            except DatabaseError as exc:
                self.log.warning(events.ALERT_STATE_NOT_SAVED, key=key, error=str(exc)[:300])
                return


def _heard_it(cfg: AlertsConfig, note: Notification, state: AlertState | None) -> AlertsConfig:
    """Where `note` goes: a "resolved" only to the channels that heard the alert fire (or
    a reminder of it): a channel added later, or none then, is not told a lone end."""
    heard = state.detail.get("sent_to") if state is not None else None
    if note.kind != "resolved" or heard is None:
        return cfg
    return replace(
        cfg,
        webhook_url=cfg.webhook_url if WEBHOOK in heard else "",
        email_to=cfg.email_to if EMAIL in heard else (),
    )


def _untold(new: dict[str, AlertState], note: Notification, errors: dict[str, str]) -> None:
    """No channel took `note`. The state stands as judged all the same (the dashboard and
    /metrics show the alert as it is, `since` when it began), and every channel is owed the
    message, tried again on each later tick until it takes it or a newer one replaces it
    (owed.py). Before, the old state was kept: a down channel hid what no channel shows."""
    state = new.get(note.key)
    if state is not None and note.kind == "firing":  # nobody heard of it yet (the page)
        new[note.key] = replace(state, detail={**state.detail, "sent_to": []})
    owe(new, note, errors)
