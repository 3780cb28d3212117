"""Security properties users rely on: secrets stay secret.

The database password and FORKQ_SMTP_PASSWORD never appear in the daemon's logs, the
process titles, `forkq status/show/jobs/check` or alert messages — with the database
unreachable, the login refused, and the SMTP relay down, which is when errors (and the
URLs in them) get printed. Rows are data, never code: tests/store/test_security_rows.py;
SQL is never built by string formatting: tests/unit/test_security_sql.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import structlog
import util
from daemon_util import Daemon, render_config, title_of
from private_mariadb import PrivateMariaDB, Webhook, private_mariadb  # noqa: F401
from util import dies_with_us, free_tcp_port, wait_until

from supervisor import events
from supervisor.cli import parser as cli
from supervisor.store import open_store

pytestmark = pytest.mark.timeout(120, method="thread")  # the worker's soft timeout owns SIGALRM


@pytest.fixture(autouse=True)
def fresh_logging() -> Iterator[None]:
    """An in-process `cli.main` binds structlog to the stdout pytest captured for that test,
    which is closed afterwards: start and end every test with structlog's defaults."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


QUEUE = "sec"


def insert_raw(db_url: str, handler: str, payload: Any, queue: str = QUEUE) -> int:
    return util.insert_raw(db_url, handler, payload, queue)


DB_PASSWORD = "Pw-7kQz93-dbleak"  # distinctive: found anywhere only if it leaked
WRONG_PASSWORD = "Pw-Wr0ng-88x-dbleak"
SMTP_PASSWORD = "Smtp-4nV8-relayleak"
WEBHOOK_TOKEN = "HookTok-51e7"
SECRETS = (DB_PASSWORD, WRONG_PASSWORD, SMTP_PASSWORD)


# --- secrets ---------------------------------------------------------------------------------------


def leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


@pytest.fixture(scope="module")
def secure_server(private_mariadb: PrivateMariaDB) -> Iterator[PrivateMariaDB]:  # noqa: F811
    """The private server with a user whose password is distinctive, and a database."""
    private_mariadb.create_user("fq_sec", DB_PASSWORD, "forkq_sec")
    store = open_store(private_mariadb.url_for("fq_sec", DB_PASSWORD, "forkq_sec"))
    try:
        store.apply_schema()
    finally:
        store.close()
    yield private_mariadb


@pytest.fixture
def urls(secure_server: PrivateMariaDB) -> dict[str, str]:
    if not secure_server.alive():
        secure_server.start()
    secure_server.admin("DELETE FROM forkq_sec.forkq_jobs")  # each test starts with no jobs
    closed = free_tcp_port()
    return {
        "good": secure_server.url_for("fq_sec", DB_PASSWORD, "forkq_sec"),
        "unreachable": f"mysql://fq_sec:{DB_PASSWORD}@127.0.0.1:{closed}/forkq_sec",
        "refused": secure_server.url_for("fq_sec", WRONG_PASSWORD, "forkq_sec"),
    }


def alerts_section(webhook_url: str, smtp_port: int) -> str:
    return (
        "\n[alerts]\n"
        f"webhook_url = {json.dumps(webhook_url)}\n"
        'email_to = ["ops@example.com"]\n'
        'email_from = "forkq@example.com"\n'
        'smtp_host = "127.0.0.1"\n'
        f"smtp_port = {smtp_port}\n"
        'smtp_user = "forkq-alerts"\n'
        "smtp_timeout = 1\n"
        "webhook_timeout = 2\n"
        'cooldown = "1h"\n'
        "\n[alerts.defaults]\n"
        "max_dead = 0\n"
    )


def make_daemon(directory: Path, url: str, alerts: str) -> Daemon:
    """A daemon whose URL comes from FORKQ_DATABASE_URL (the file names a decoy)."""
    daemon = Daemon(
        directory,
        "sqlite:///decoy-never-used.db",
        pools={QUEUE: {"workers": 2, "timeout": 10}},
        env={"FORKQ_DATABASE_URL": url, "FORKQ_SMTP_PASSWORD": SMTP_PASSWORD},
    )
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + alerts)
    return daemon


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    hook.url = hook.url.replace("T0K3N", WEBHOOK_TOKEN)
    yield hook
    hook.close()


def test_a_daemon_that_cannot_log_in_says_why_without_the_password(
    urls: dict[str, str], tmp_path: Path
) -> None:
    # A server that refuses the login: one line, exit 1.
    daemon = make_daemon(
        tmp_path / "refused", urls["refused"], alerts_section("http://127.0.0.1:9/x", 9)
    )
    try:
        daemon.start()
        assert daemon.wait_exit(30) == 1, daemon.describe()
        output = daemon.log_text() + daemon.stderr_text()
        assert "forkq: error: database" in output, output
        assert leaks(output) == [], output
    finally:
        daemon.kill_all()
    # A server that does not answer yet is waited for at boot (SPEC: never a crash), and
    # says why on every try, still without the password; a stop ends the wait.
    daemon = make_daemon(
        tmp_path / "unreachable", urls["unreachable"], alerts_section("http://127.0.0.1:9/x", 9)
    )
    try:
        daemon.start()
        daemon.wait_event(events.DB_UNREACHABLE, timeout=30, count=2)
        assert daemon.stop(timeout=20) == 0, daemon.describe()
        output = daemon.log_text() + daemon.stderr_text()
        assert "database unreachable" in output, output
        assert leaks(output) == [], output
    finally:
        daemon.kill_all()


def test_no_secret_in_logs_titles_or_alerts_while_the_database_and_smtp_fail(
    secure_server: PrivateMariaDB, urls: dict[str, str], tmp_path: Path, webhook: Webhook
) -> None:
    smtp_port = free_tcp_port()  # nothing listens: every mail fails and is logged
    daemon = make_daemon(tmp_path / "good", urls["good"], alerts_section(webhook.url, smtp_port))
    try:
        daemon.start().wait_ready()
        insert_raw(urls["good"], "os.system", json.dumps("true"))  # dies: a max_dead alert
        wait_until(
            lambda: any("dead" in t for t in webhook.texts),
            timeout=20,
            message=f"the max_dead alert ({daemon.describe()})",
        )
        secure_server.kill9()  # the database goes away: errors, a db alert
        wait_until(
            lambda: any("database unreachable" in t for t in webhook.texts),
            timeout=20,
            message=f"the database alert ({webhook.texts}; {daemon.describe()})",
        )
        titles = [title_of(psutil.Process(daemon.pid)), *daemon.child_titles().values()]
        secure_server.start()
        wait_until(
            lambda: any("resolved" in t and "database" in t for t in webhook.texts),
            timeout=30,
            message=f"the database alert resolved ({webhook.texts}; {daemon.describe()})",
        )
        titles += [title_of(psutil.Process(daemon.pid)), *daemon.child_titles().values()]
        assert daemon.stop(timeout=30) == 0
    finally:
        daemon.kill_all()
    output = daemon.log_text() + daemon.stderr_text()
    assert daemon.events(events.ALERT_SEND_FAILED), "the SMTP failure was never logged"
    assert daemon.events(events.DB_UNREACHABLE), "the outage was never logged"
    assert titles and all(t.startswith("forkq: ") for t in titles), titles
    assert leaks(output) == [] and WEBHOOK_TOKEN not in output, [
        line for line in output.splitlines() if leaks(line) or WEBHOOK_TOKEN in line
    ][:5]
    assert leaks(" ".join(titles)) == []
    assert leaks(" ".join(webhook.texts)) == [] and WEBHOOK_TOKEN not in " ".join(webhook.texts)


LEAKY_HANDLERS = """
import os

from supervisor import handler


@handler("leak.raise", queue="sec")
def leak(payload, job):  # a failed connect that quotes what it was given
    raise RuntimeError(
        "connect failed: " + os.environ["FORKQ_DATABASE_URL"] + " smtp="
        + os.environ["FORKQ_SMTP_PASSWORD"] + " hook=" + payload["hook"]
    )
"""


def test_a_handler_that_quotes_the_daemons_secrets_shows_them_masked(
    urls: dict[str, str], tmp_path: Path, webhook: Webhook
) -> None:
    """The error of a Python handler and the stderr of a command, which quote the
    database URL, the SMTP password and the webhook URL the daemon was given, reach
    last_error, the attempt history and the `job_finished` line with each as `***`."""
    alerts = alerts_section(webhook.url, free_tcp_port())
    daemon = make_daemon(tmp_path, urls["good"], alerts)
    daemon.write_module("leaky", LEAKY_HANDLERS)
    script = "import sys; sys.stderr.write('PDO error: ' + sys.argv[1] + '\\n'); sys.exit(1)"
    argv = [sys.executable, "-c", script, urls["good"]]  # a PHP job given the URL
    supervisor = {**daemon.supervisor, "handlers": ["testhandlers", "leaky"]}
    command = f'\n[commands."leak.cmd"]\nargv = {json.dumps(argv)}\nqueue = "{QUEUE}"\n'
    daemon.write_config(
        text=render_config(daemon.db_url, daemon.pools, supervisor) + alerts + command
    )
    try:
        daemon.start().wait_ready()
        from supervisor import Queue

        producer = Queue(urls["good"])
        raised = producer.enqueue("leak.raise", {"hook": webhook.url}, queue=QUEUE, max_attempts=1)
        printed = producer.enqueue("leak.cmd", {}, queue=QUEUE, max_attempts=1)
        wait_until(
            lambda: (
                [getattr(producer.get(i), "status", None) for i in (raised, printed)]
                == ["dead", "dead"]
            ),
            timeout=30,
            message=f"both jobs dead ({daemon.describe()})",
        )
        assert daemon.stop(timeout=30) == 0
    finally:
        daemon.kill_all()
    store = open_store(urls["good"])
    try:
        errors = [store.get_job(i).last_error or "" for i in (raised, printed)]  # type: ignore[union-attr]
        history = json.dumps([store.job_attempts(i) for i in (raised, printed)], default=str)
    finally:
        store.close()
    assert "connect failed: mysql://fq_sec:***@" in errors[0] and "smtp=***" in errors[0]
    assert "hook=***" in errors[0] and "PDO error: mysql://fq_sec:***@" in errors[1], errors
    finished = [e for e in daemon.events(events.JOB_FINISHED) if e.get("error")]
    assert len(finished) == 2 and all("***" in e["error"] for e in finished), finished
    seen = " ".join([*errors, history, daemon.log_text(), daemon.stderr_text()])
    assert leaks(seen) == [] and WEBHOOK_TOKEN not in seen


def test_no_secret_in_cli_output(
    urls: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in list(os.environ):
        if key.startswith("FORKQ_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("FORKQ_SMTP_PASSWORD", SMTP_PASSWORD)
    monkeypatch.chdir(tmp_path)
    job_id = insert_raw(urls["good"], "os.system", json.dumps("true"))
    config = tmp_path / "forkq.toml"
    config.write_text(
        f"[database]\nurl = {json.dumps(urls['good'])}\n\n[pools.{QUEUE}]\nworkers = 1\n"
        + alerts_section(
            f"http://127.0.0.1:{free_tcp_port()}/hooks/{WEBHOOK_TOKEN}", free_tcp_port()
        )
    )
    commands = [
        ["status"],
        ["status", "--json"],
        ["jobs"],
        ["jobs", "--json"],
        ["show", str(job_id)],
        ["show", str(job_id), "--json"],
        ["check"],
        ["locks"],
    ]
    outputs = []
    for name, url in urls.items():
        for command in commands:
            for argv in ([*command, "--database", url], [*command, "-c", str(config)]):
                if name != "good" and argv[-2] == "-c":
                    continue
                capsys.readouterr()
                code = cli.main(argv)
                out, err = capsys.readouterr()
                outputs.append((name, argv, code, out + err))
        monkeypatch.setenv("FORKQ_DATABASE_URL", url)
        capsys.readouterr()
        code = cli.main(["status"])
        out, err = capsys.readouterr()
        outputs.append((name, ["status", "(FORKQ_DATABASE_URL)"], code, out + err))
        monkeypatch.delenv("FORKQ_DATABASE_URL")
    capsys.readouterr()
    code = cli.main(["alerts", "test", "-c", str(config)])
    out, err = capsys.readouterr()
    outputs.append(("good", ["alerts", "test"], code, out + err))

    assert [o for o in outputs if o[0] == "good" and o[2] not in (0,) and o[1][0] != "alerts"] == []
    assert all(o[2] == 1 for o in outputs if o[0] != "good" and o[1][0] != "check"), outputs
    assert "FAIL" in outputs[-1][3] and "email" in outputs[-1][3], outputs[-1]
    leaked = [(o[1], leaks(o[3])) for o in outputs if leaks(o[3]) or WEBHOOK_TOKEN in o[3]]
    assert leaked == []
    assert any("mysql://fq_sec:***@" in o[3] for o in outputs), "the URL is shown redacted"


def test_a_password_given_on_the_command_line_is_gone_from_the_titles(
    urls: dict[str, str], tmp_path: Path
) -> None:
    """`forkq run --database URL`, the worst case (FORKQ_DATABASE_URL is the advice): once
    the titles are set, /proc/PID/cmdline of the master and its children no longer shows it."""
    daemon = make_daemon(tmp_path / "argv", urls["good"], "")
    del daemon.extra_env["FORKQ_DATABASE_URL"]
    command = [
        sys.executable,
        "-m",
        "supervisor",
        "run",
        "-c",
        str(daemon.config_path),
        "--database",
        urls["good"],
    ]
    with open(daemon.log_path, "ab") as out:
        daemon.proc = subprocess.Popen(
            command,
            cwd=daemon.directory,
            env=daemon.environment(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            preexec_fn=dies_with_us(daemon.parent_death_signal),
        )
    daemon.sid = daemon.proc.pid
    try:
        daemon.wait_ready()
        raw = [psutil.Process(daemon.pid).cmdline()] + [c.cmdline() for c in daemon.children()]
        titles = [" ".join(argv).strip() for argv in raw]
        assert titles[0] == "forkq: master" and len(titles) == 3, titles
        assert leaks(" ".join(titles)) == []
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait_exit(30) == 0
    finally:
        daemon.kill_all()
    assert leaks(daemon.log_text()) == []
