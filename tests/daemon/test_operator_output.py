"""What rows can make operators see (issue 12, item 13).

Queue names, handler names, unique keys and errors come from rows any producer can
write. Through the real `forkq` command line: `status`, `jobs`, `show` and the
console log never send a control character to the terminal (ESC, CR, BEL, C1, bidi
overrides are shown as escapes), and a newline in a queue name never makes a table
line of its own; `--json` stays exact. Through a real webhook receiver and a real
SMTP server on loopback: chat text follows Slack's escaping (`&`, `<`, `>`), plain
mentions and Markdown links are neutralised, and mail carries no header a row wrote.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from private_mariadb import Webhook
from util import free_tcp_port, subprocess_env

from supervisor import Queue, events
from supervisor.cluster.alerts.channels import AlertRunner
from supervisor.cluster.alerts.states import Snapshot
from supervisor.config import build_config
from supervisor.store import Store

OWNER = "test-host:1:feedbeef"
TERMINAL_ATTACK = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\rCR\x9b1m\u202eevil"
FORGED_QUEUE = "q\nFORGED    99    0"  # a second table line, if printed raw
HOSTILE_HANDLER = "h\x1b[2J\x07\r"
HOSTILE_ERROR = "boom \x1b[31mred\x07\nsecond line \x1b[2J\r\nthird \u2028fourth"
# Anything the terminal acts on; a newline is allowed only where the command prints one.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def forkq(workdir: Path, db_url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = subprocess_env(db_url, **{"FORKQ_LOG_FORMAT": "json", **env})
    environ.pop("FORKQ_CONFIG", None)
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        cwd=workdir,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result


def assert_inert(text: str) -> None:
    found = sorted({repr(c) for c in CONTROL.findall(text)})
    assert not found, f"control characters reach the terminal: {found}\n{text!r}"


@pytest.fixture
def hostile(store: Store) -> dict[str, int]:
    """Jobs whose names and error are hostile, through the public API (as any app could)."""
    queue = Queue(store=store)
    ids = {
        "terminal": queue.enqueue(
            HOSTILE_HANDLER, {"x": TERMINAL_ATTACK}, queue=TERMINAL_ATTACK, unique_key="k\x1b"
        ),
        "forged": queue.enqueue("t.noop", {}, queue=FORGED_QUEUE),
        "failed": queue.enqueue("t.noop", {}, queue="plain"),
    }
    [claimed] = store.claim("plain", OWNER, 1, 60)
    assert store.fail(OWNER, claimed.id, HOSTILE_ERROR, dead=True)
    return ids


# --- the command line -------------------------------------------------------------------------


def test_jobs_prints_one_inert_line_per_job(
    tmp_path: Path, db_url: str, hostile: dict[str, int]
) -> None:
    out = forkq(tmp_path, db_url, "jobs").stdout
    assert_inert(out)
    lines = out.rstrip("\n").split("\n")
    assert len(lines) == 1 + len(hostile), out
    assert not any(line.startswith("FORGED") for line in lines)
    assert "\\x1b[2J" in out and "q\\nFORGED" in out  # shown, as escapes


def test_status_prints_one_inert_line_per_queue(
    tmp_path: Path, db_url: str, hostile: dict[str, int]
) -> None:
    out = forkq(tmp_path, db_url, "status").stdout
    assert_inert(out)
    queues = json.loads(forkq(tmp_path, db_url, "status", "--json").stdout)["queues"]
    assert FORGED_QUEUE in [q["queue"] for q in queues]
    queues_table = out.split("\n\n")[0].split("\n")
    assert len(queues_table) == 1 + len(queues), out  # the header and one line a queue
    assert not any(line.startswith("FORGED") for line in out.split("\n"))


def test_status_names_unserved_and_waiting_queues_inert(
    tmp_path: Path, db_url: str, store: Store, hostile: dict[str, int]
) -> None:
    """With a config file, the lines under the table name queues no pool serves and
    queues with jobs waiting on parents: from rows too, so escaped alike."""
    Queue(store=store).enqueue("t.noop", {}, queue=FORGED_QUEUE, depends_on=[hostile["terminal"]])
    (tmp_path / "forkq.toml").write_text("[pools.plain]\nworkers = 1\n")
    out = forkq(tmp_path, db_url, "status", "-c", "forkq.toml").stdout
    assert_inert(out)
    assert "no pool of forkq.toml serves: " in out and "waiting on parents" in out, out
    assert not any(line.startswith("FORGED") for line in out.split("\n")), out
    assert "q\\nFORGED" in out


def test_show_prints_fields_inert_and_the_error_on_its_own_lines(
    tmp_path: Path, db_url: str, hostile: dict[str, int]
) -> None:
    for name in ("terminal", "failed"):
        out = forkq(tmp_path, db_url, "show", str(hostile[name])).stdout
        assert_inert(out)
    error_lines = out.split("last_error:\n", 1)[1].rstrip("\n").split("\n")
    # The error's own line breaks stay (a traceback reads as one); a CR, ESC or
    # U+2028 inside a line is an escape, and every line is indented under the field.
    assert error_lines == [
        "  boom \\x1b[31mred\\x07",
        "  second line \\x1b[2J",
        "  third \\u2028fourth",
    ]


def test_json_output_keeps_every_character_exact(
    tmp_path: Path, db_url: str, hostile: dict[str, int]
) -> None:
    jobs = json.loads(forkq(tmp_path, db_url, "jobs", "--json").stdout)
    assert {job["queue"] for job in jobs} == {TERMINAL_ATTACK, FORGED_QUEUE, "plain"}
    assert HOSTILE_HANDLER in {job["handler"] for job in jobs}
    shown = json.loads(forkq(tmp_path, db_url, "show", str(hostile["failed"]), "--json").stdout)
    assert shown["last_error"] == HOSTILE_ERROR
    status = json.loads(forkq(tmp_path, db_url, "status", "--json").stdout)
    assert FORGED_QUEUE in {q["queue"] for q in status["queues"]}


def test_the_console_log_shows_a_hostile_handler_name_as_escapes(
    tmp_path: Path, db_url: str, store: Store
) -> None:
    # No CR, newline, space or quote: structlog itself would repr() such a value.
    Queue(store=store).enqueue("t.\x1b]0;owned\x07\x1b[2J\x9b1m\u202e", {}, queue="work")
    result = forkq(
        tmp_path, db_url, "work", "--burst", "--queues", "work", FORKQ_LOG_FORMAT="console"
    )
    assert events.JOB_FINISHED in result.stdout, result.stdout
    assert_inert(result.stdout)
    assert_inert(result.stderr)
    assert "\\x1b]0;owned" in result.stdout


# --- alerts: a webhook and a mail server on loopback ------------------------------------------------

CHAT_QUEUE = "<!channel> @here <http://e.vil|x> [y](http://e.vil) &\nFAKE"
MAIL_QUEUE = "m\r\nBcc: evil@example.com\r\n\r\nforged"


class Sink:
    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, email.message.EmailMessage)
        self.messages.append(message)
        return "250 OK"


@pytest.fixture
def receivers() -> Iterator[tuple[Webhook, Sink, int]]:
    hook, sink, port = Webhook(), Sink(), free_tcp_port()
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    yield hook, sink, port
    controller.stop()
    hook.close()
    asyncio.set_event_loop(None)


def test_alerts_about_hostile_queue_names_are_escaped_for_chat_and_mail(
    store: Store, receivers: tuple[Webhook, Sink, int]
) -> None:
    hook, sink, port = receivers
    queue = Queue(store=store)
    queue.enqueue("t.noop", {}, queue=CHAT_QUEUE)
    queue.enqueue("t.noop", {}, queue=MAIL_QUEUE)
    alerts = {
        "webhook_url": hook.url,
        "email_to": ["ops@example.com"],
        "email_from": "forkq@example.com",
        "smtp_host": "127.0.0.1",
        "smtp_port": port,
        "smtp_timeout": 5,
        "defaults": {"max_ready": 0},
    }
    cfg = build_config({"alerts": alerts}, "test.toml").alerts
    sent = AlertRunner().run(store, cfg, Snapshot(host="app1", queues=store.stats()), time.time())
    assert len(sent) == 2 and len(hook.texts) == 2 and len(sink.messages) == 2

    for text in hook.texts:
        assert "<" not in text and ">" not in text, text  # Slack: only entities
        assert "\n" not in text and "\r" not in text
        assert not re.search(r"@(here|channel|everyone)\b", text), text
        assert "](" not in text
    chat = next(t for t in hook.texts if "channel" in t)
    assert "&lt;!channel&gt;" in chat and "&lt;http://e.vil|x&gt;" in chat
    assert "&amp;\\nFAKE" in chat and "&gt; max_ready 0" in chat

    for message in sink.messages:
        assert message["Bcc"] is None
        assert "\n" not in str(message["Subject"]) and "\r" not in str(message["Subject"])
        body = message.get_content()
        assert not any(line.startswith(("Bcc:", "forged")) for line in body.splitlines()), body
    mail = next(m for m in sink.messages if "Bcc" in str(m["Subject"]))
    assert "m\\r\\nBcc: evil@example.com\\r\\n\\r\\nforged" in str(mail["Subject"])
    assert "m\\r\\nBcc: evil@example.com" in mail.get_content()
