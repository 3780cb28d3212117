"""Command handlers (issue 16 item 1) in the real daemon, on both backends.

A `[commands."NAME"]` table makes the pool child run a program per job: the PHP example
handler (handlers/php/send_report.php) under Debian's php-cli ends its jobs done, dead
(exit 65, its stderr line in last_error) and retried (exit 1); megabytes on stdout and
stderr never stall the child and reach the log line by line, capped, escaped; the
program's environment holds what the table gives and forkq's own variables, never the
daemon's secrets; exit 75 with `forkq-retry-after:` on the last stderr line sets the
retry's delay.
"""

from __future__ import annotations

import math
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from command_util import QUEUE, command_daemon, commands_toml, script, status_is, wait_job
from daemon_util import Daemon, daemons_fixture, render_config  # noqa: F401  (the `daemons` fixture)
from util import REPO_ROOT, unavailable

from supervisor import Queue, events
from supervisor.store import Store, open_store
from supervisor.work.pipes import MAX_LINE_CHARS, MAX_LOGGED_LINES

pytestmark = pytest.mark.timeout(120)

SEND_REPORT = REPO_ROOT / "handlers" / "php" / "send_report.php"
GOOD_REPORT = {"report": "sales", "to": "boss@example.com", "day": "2026-01-31"}
BIG = 5 * 1024 * 1024  # bytes each of stdout and stderr
FOLD = 99  # characters a line


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    made = open_store(db_url)
    yield made
    made.close()


@pytest.fixture
def queue(db_url: str) -> Iterator[Queue]:
    made = Queue(db_url, wake=False)
    yield made
    made.close()


def php() -> str:
    found = shutil.which("php")
    if not found:
        unavailable("php is not installed: apt-get install php-cli")
    return str(found)


def output_events(daemon: Daemon, job_id: int, stream: str) -> list[dict[str, object]]:
    return daemon.events(events.COMMAND_OUTPUT, job_id=job_id, stream=stream)


# --- the PHP example ---------------------------------------------------------------------


def test_php_example_handler_ends_done_dead_and_retried(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox"
    outbox.mkdir()
    argv = [php(), str(SEND_REPORT)]
    daemon = command_daemon(
        daemons,
        {
            "report.send": {"argv": argv, "queue": QUEUE, "env": {"REPORT_OUTBOX": str(outbox)}},
            "report.nowhere": {
                "argv": argv,
                "queue": QUEUE,
                "env": {"REPORT_OUTBOX": str(tmp_path / "missing")},
                "max_attempts": 2,
                "backoff_base": 0.05,
                "backoff_cap": 0.1,
            },
        },
    )
    daemon.start().wait_ready()
    sent = queue.enqueue("report.send", GOOD_REPORT, queue=QUEUE)
    bad = queue.enqueue("report.send", {"report": "weather", "to": "x"}, queue=QUEUE)
    unsent = queue.enqueue("report.nowhere", GOOD_REPORT, queue=QUEUE)

    row = wait_job(store, sent, status_is("done"), daemon)
    assert row.attempts == 1
    report = (outbox / f"report-{sent}.txt").read_text()
    assert report.startswith("To: boss@example.com\nSubject: sales report for 2026-01-31")
    lines = [e["line"] for e in output_events(daemon, sent, "stderr")]
    assert lines == [
        f"send_report job={sent} attempt=1: sent the sales report for 2026-01-31"
        f" to boss@example.com ({outbox}/report-{sent}.txt)"
    ]

    row = wait_job(store, bad, status_is("dead"), daemon)
    assert row.attempts == 1  # exit 65: dead at once, attempts left or not
    assert row.last_error == (
        f"failed permanently: exit 65 (EX_DATAERR): send_report job={bad} attempt=1:"
        " bad payload: report must be one of sales, stock, signups"
    )

    row = wait_job(store, unsent, status_is("dead"), daemon)
    assert row.attempts == 2  # exit 1: retried with backoff, then out of attempts
    assert row.last_error is not None
    assert row.last_error.startswith(f"exit 1: send_report job={unsent} attempt=2: not sent,")
    assert "REPORT_OUTBOX is not a writable directory" in row.last_error
    assert row.last_error.endswith("(attempt 2 of 2)")
    assert "Traceback" not in row.last_error
    first = [e["line"] for e in output_events(daemon, unsent, "stderr")]
    assert len(first) == 2 and "attempt=1: not sent" in str(first[0])
    assert daemon.stop() == 0, daemon.describe()


# --- output ------------------------------------------------------------------------------


def test_megabytes_on_both_pipes_never_stall_and_reach_the_log_capped(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    """5 MB on stdout and on stderr at once: the child reads both while it waits, so the
    program never blocks on a full pipe. 1,000 lines a stream are logged and the rest
    counted; the last, unterminated line counts too."""
    both = (
        f"head -c {BIG} /dev/zero | tr '\\0' o | fold -w {FOLD} &\n"
        f"head -c {BIG} /dev/zero | tr '\\0' e | fold -w {FOLD} >&2\n"
        "wait\n"
    )
    odd = (
        # an escape sequence, bytes that are not UTF-8, and a 300 KB line
        "printf 'esc \\033[31mred\\033[0m bell \\007\\n'\n"
        "printf 'latin1 \\351t\\351\\n'\n"
        "head -c 300000 /dev/zero | tr '\\0' L\n"
        "printf '\\nafter the long one\\n'\n"
    )
    daemon = command_daemon(
        daemons,
        {
            "t.loud": {"argv": [script(tmp_path, "loud.sh", both)], "queue": QUEUE},
            "t.odd": {"argv": [script(tmp_path, "odd.sh", odd)], "queue": QUEUE},
        },
    )
    daemon.start().wait_ready()
    loud = queue.enqueue("t.loud", {}, queue=QUEUE)
    odd_id = queue.enqueue("t.odd", {}, queue=QUEUE)
    wait_job(store, loud, status_is("done"), daemon, timeout=90)
    wait_job(store, odd_id, status_is("done"), daemon)

    total = math.ceil(BIG / FOLD)  # fold's lines, the last without its newline
    for stream, char in (("stdout", "o"), ("stderr", "e")):
        logged = output_events(daemon, loud, stream)
        assert len(logged) == MAX_LOGGED_LINES
        assert {e["line"] for e in logged} == {char * FOLD}
        capped = daemon.events(events.COMMAND_OUTPUT_CAPPED, job_id=loud, stream=stream)
        assert [e["lines_not_logged"] for e in capped] == [total - MAX_LOGGED_LINES]

    lines = output_events(daemon, odd_id, "stdout")
    assert [e["line"] for e in lines[:2]] == [
        "esc \x1b[31mred\x1b[0m bell \x07",
        "latin1 \ufffdt\ufffd",
    ]
    long = lines[2]
    assert long["truncated"] is True
    assert long["line"] == "L" * MAX_LINE_CHARS
    assert lines[3]["line"] == "after the long one"
    assert len(lines) == 4
    raw = daemon.log_path.read_bytes()
    assert b"\x1b" not in raw and b"\x07" not in raw  # escaped by the JSON lines
    assert daemon.stop() == 0, daemon.describe()


# --- environment -------------------------------------------------------------------------


def test_environment_holds_only_the_table_env_pass_env_path_lang_and_forkq_variables(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, db_url: str, tmp_path: Path
) -> None:
    dump = tmp_path / "env.dump"
    secrets = {
        "FORKQ_DATABASE_URL": db_url,  # MariaDB's has its password
        "FORKQ_SMTP_PASSWORD": "smtp-secret-0d1e",
        "FORKQ_WEB_TOKEN": "web-token-77c4",
        "APP_SECRET": "app-secret-5b2a",  # in the daemon's environment, not passed
    }
    daemon = command_daemon(
        daemons,
        {
            "t.env": {
                "argv": ["sh", "-c", 'env > "$DUMP"'],
                "queue": QUEUE,
                "env": {"DUMP": str(dump), "APP_ENV": "production"},
                "pass_env": ["APP_KEY", "NOT_SET_ANYWHERE"],
            }
        },
        env={**secrets, "APP_KEY": "base64:k3y", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"},
    )
    daemon.start().wait_ready()
    job_id = queue.enqueue("t.env", {}, queue=QUEUE)
    wait_job(store, job_id, status_is("done"), daemon)
    text = dump.read_text()
    env = dict(line.split("=", 1) for line in text.splitlines())
    env.pop("PWD", None)  # the shell's own (dash exports its working directory)
    assert env == {
        "PATH": daemon.environment()["PATH"],
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "DUMP": str(dump),
        "APP_ENV": "production",
        "APP_KEY": "base64:k3y",  # named in pass_env; NOT_SET_ANYWHERE is not set: absent
        "FORKQ_JOB_ID": str(job_id),
        "FORKQ_QUEUE": QUEUE,
        "FORKQ_HANDLER": "t.env",
        "FORKQ_ATTEMPT": "1",
    }
    for value in secrets.values():
        assert value not in text
    assert daemon.stop() == 0, daemon.describe()


# --- the retry channel ---------------------------------------------------------------------


def test_exit_75_retries_after_the_delay_on_the_last_stderr_line(
    daemons: Callable[..., Daemon], store: Store, queue: Queue
) -> None:
    slow = {"backoff_base": 2000, "backoff_cap": 2000}  # a backoff: 1000 to 2000 s
    daemon = command_daemon(
        daemons,
        {
            "t.later": {
                "argv": ["sh", "-c", "echo busy >&2; echo 'forkq-retry-after: 2m' >&2; exit 75"],
                "queue": QUEUE,
                **slow,
            },
            "t.tempfail": {"argv": ["sh", "-c", "echo busy >&2; exit 75"], "queue": QUEUE, **slow},
            "t.badhint": {
                "argv": ["sh", "-c", "echo 'forkq-retry-after: soon' >&2; exit 75"],
                "queue": QUEUE,
                **slow,
            },
        },
    )
    daemon.start().wait_ready()
    ids = {
        name: queue.enqueue(name, {}, queue=QUEUE)
        for name in ("t.later", "t.tempfail", "t.badhint")
    }
    rows = {
        name: wait_job(store, job_id, lambda row: row.last_error is not None, daemon)
        for name, job_id in ids.items()
    }
    now = store.db_now()
    delays = {name: row.run_at.timestamp() - now for name, row in rows.items()}

    assert 100 <= delays["t.later"] <= 120  # asked for 2 minutes
    assert rows["t.later"].last_error == "retry requested: exit 75 (EX_TEMPFAIL): busy"
    assert 900 <= delays["t.tempfail"] <= 2000  # no delay asked: the backoff
    assert rows["t.tempfail"].last_error == "retry requested: exit 75 (EX_TEMPFAIL): busy"
    assert 900 <= delays["t.badhint"] <= 2000  # not a duration: ignored, and said so
    assert rows["t.badhint"].last_error == (
        "retry requested: exit 75 (EX_TEMPFAIL): forkq-retry-after: soon"
    )
    assert daemon.events(events.COMMAND_RETRY_AFTER_IGNORED, job_id=ids["t.badhint"])
    for row in rows.values():
        assert row.attempts == 1 and str(row.status) in ("scheduled", "ready")
    assert daemon.stop() == 0, daemon.describe()


# --- reload ------------------------------------------------------------------------------


def test_a_reload_picks_up_changed_added_and_removed_commands(
    daemons: Callable[..., Daemon], store: Store, queue: Queue, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    table = {"queue": QUEUE, "env": {"OUT": str(out)}}
    before = {
        "t.version": {"argv": ["sh", "-c", 'echo v1 > "$OUT"'], **table},
        "t.gone": {"argv": ["true"], "queue": QUEUE},
    }
    daemon = command_daemon(daemons, before)
    daemon.start().wait_ready()
    first = queue.enqueue("t.version", {}, queue=QUEUE)
    wait_job(store, first, status_is("done"), daemon)
    assert out.read_text() == "v1\n"

    after = {
        "t.version": {"argv": ["sh", "-c", 'echo v2 > "$OUT"'], **table},
        "t.added": {"argv": ["true"], "queue": QUEUE},
    }
    command_daemon_text = render_config(daemon.db_url, daemon.pools, daemon.supervisor)
    daemon.write_config(text=command_daemon_text + commands_toml(after))
    daemon.send_signal(signal.SIGHUP)
    daemon.wait_event(events.CONFIG_RELOADED)
    daemon.wait_ready()
    changed = queue.enqueue("t.version", {}, queue=QUEUE)
    added = queue.enqueue("t.added", {}, queue=QUEUE)
    gone = queue.enqueue("t.gone", {}, queue=QUEUE)
    wait_job(store, changed, status_is("done"), daemon)
    assert out.read_text() == "v2\n"
    wait_job(store, added, status_is("done"), daemon)
    row = wait_job(store, gone, status_is("dead"), daemon)
    assert row.last_error is not None and "unknown handler 't.gone'" in row.last_error
    assert daemon.stop() == 0, daemon.describe()
