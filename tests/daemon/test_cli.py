"""`forkq` as users run it: a real subprocess, its exit codes, its output, what it stored."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from util import (
    SCHEMA_SQL,
    SQLITE_SCHEMA_SQL,
    database_name,
    free_tcp_port,
    mysql_connect,
    sql,
    subprocess_env,
)

from supervisor import Queue
from supervisor.cli import commands
from supervisor.cli import parser as cli
from supervisor.dburl import parse_database_url
from supervisor.models import JobState
from supervisor.store import SCHEMA_VERSION, Store, open_store

OWNER = "test-host:1:feedbeef"  # a lease owner that is not a real process
HANDLER_MODULE = """
from supervisor import handler

@handler("mail.send", queue="mail", max_attempts=4)
def send(payload, job):
    pass
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """tmp_path with a handler module `clihandlers` and a config `forkq.toml` naming it."""
    (tmp_path / "clihandlers.py").write_text(HANDLER_MODULE)
    (tmp_path / "forkq.toml").write_text('[supervisor]\nhandlers = ["clihandlers"]\n')
    return tmp_path


def forkq_env(workdir: Path, database: str | None = None, **env: str) -> dict[str, str]:
    """The environment of a `forkq` subprocess: the handler module importable, JSON logs."""
    environ = subprocess_env(database or "sqlite:///unused.db", FORKQ_LOG_FORMAT="json")
    environ["PYTHONPATH"] = f"{workdir}:{environ['PYTHONPATH']}"
    environ.pop("FORKQ_CONFIG", None)
    environ.update(env)
    return environ


def forkq(
    workdir: Path, *args: str, database: str | None = None, timeout: float = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run `python -m supervisor ARGS [--database URL]` in `workdir`."""
    command = [sys.executable, "-m", "supervisor", *args]
    if database is not None:
        command += ["--database", database]
    return subprocess.run(
        command,
        cwd=workdir,
        env=forkq_env(workdir, database, **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def failed(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The one stderr line of a refused command, checked to be exactly that."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("forkq: error: "), lines[0]
    return lines[0]


def dead_job(producer: Queue, store: Store, handler: str = "mail.send", **options: Any) -> int:
    """A job that ran and failed for good, through the store's own operations."""
    job_id = producer.enqueue(handler, {"n": 1}, **options)
    claimed = store.claim(options.get("queue", "default"), OWNER, 100, 60)
    assert job_id in [row.id for row in claimed]
    assert store.fail(OWNER, job_id, "boom: it broke\n  at line 2", dead=True)
    return job_id


# --- enqueue ------------------------------------------------------------------------------


def test_enqueue_prints_the_id_and_stores_every_option(
    workdir: Path, db_url: str, store: Store
) -> None:
    out = forkq(
        workdir,
        "enqueue",
        "mail.send",
        '{"to": "a@example.com", "n": [1, 2]}',
        "--queue",
        "urgent",
        "--delay",
        "1h",
        "--priority",
        "7",
        "--unique-key",
        "welcome-42",
        "--max-attempts",
        "3",
        database=db_url,
    )
    job_id = int(ok(out).strip())
    row = store.get_job(job_id)
    assert row is not None
    assert (row.handler, row.queue, row.priority) == ("mail.send", "urgent", 7)
    assert json.loads(row.payload) == {"to": "a@example.com", "n": [1, 2]}
    assert (row.unique_key, row.max_attempts, row.status) == ("welcome-42", 3, JobState.SCHEDULED)
    assert row.run_at - row.enqueued_at > timedelta(minutes=59)


def test_enqueue_applies_the_handlers_default_queue_and_attempts(
    workdir: Path, db_url: str, store: Store
) -> None:
    job_id = int(ok(forkq(workdir, "enqueue", "mail.send", "-c", "forkq.toml", database=db_url)))
    row = store.get_job(job_id)
    assert row is not None
    assert (row.queue, row.max_attempts, json.loads(row.payload)) == ("mail", 4, {})


@pytest.mark.parametrize("at", ["2031-01-31T00:00:00", "2031-01-31T09:00:00+09:00"])
def test_enqueue_at_takes_iso_times_naive_as_utc(
    workdir: Path, db_url: str, store: Store, at: str
) -> None:
    job_id = int(ok(forkq(workdir, "enqueue", "mail.send", "--at", at, database=db_url)))
    row = store.get_job(job_id)
    assert row is not None
    assert row.run_at == datetime(2031, 1, 31, tzinfo=UTC)


def test_enqueue_with_a_taken_unique_key_returns_the_same_id(
    workdir: Path, db_url: str, store: Store
) -> None:
    args = ("enqueue", "mail.send", '{"n": 1}', "--unique-key", "once")
    first = ok(forkq(workdir, *args, database=db_url))
    second = ok(forkq(workdir, *args, database=db_url))
    assert first == second
    assert len(store.list_jobs()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue", "mail.send", "{not json"],
        ["enqueue", "mail.send", "--at", "next tuesday"],
        ["enqueue", "mail.send", "--delay", "-5"],
        ["enqueue", "mail.send", "--delay", "5", "--at", "2031-01-01T00:00:00"],
        ["enqueue", "mail.send", "--priority", "high"],
    ],
    ids=["bad-json", "bad-at", "negative-delay", "delay-and-at", "bad-priority"],
)
def test_bad_enqueue_arguments_are_usage_errors_and_store_nothing(
    workdir: Path, db_url: str, store: Store, args: list[str]
) -> None:
    line = failed(forkq(workdir, *args, database=db_url), 2)
    if args[2:3] == ["{not json"]:
        assert "payload is not valid JSON" in line
    assert store.list_jobs() == []


def test_enqueue_with_a_broken_handler_module_is_a_config_error(
    workdir: Path, db_url: str, store: Store
) -> None:
    (workdir / "clihandlers.py").write_text("raise RuntimeError('half-written module')\n")
    line = failed(forkq(workdir, "-c", "forkq.toml", "enqueue", "mail.send", database=db_url), 78)
    assert "clihandlers" in line and "half-written module" in line
    assert line.startswith("forkq: error: forkq.toml: supervisor.handlers: ")
    assert store.list_jobs() == []


# --- usage and config errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [[], ["frobnicate"], ["status", "--no-such-flag"], ["jobs", "--limit", "0"], ["show", "x"]],
    ids=["no-command", "unknown-command", "bad-flag", "bad-limit", "bad-id"],
)
def test_bad_usage_exits_2_with_one_line(workdir: Path, args: list[str]) -> None:
    failed(forkq(workdir, *args), 2)


def test_help_exits_0(workdir: Path) -> None:
    out = ok(forkq(workdir, "enqueue", "--help"))
    assert "--unique-key" in out and "--database" in out


def test_config_with_an_unknown_key_exits_78_naming_file_and_key(
    workdir: Path, db_url: str
) -> None:
    config = workdir / "bad.toml"
    config.write_text("[supervisor]\nhandlers = []\ncheck_intervall = 5\n")
    line = failed(forkq(workdir, "status", "-c", str(config), database=db_url), 78)
    assert str(config) in line and "supervisor.check_intervall" in line


def test_config_with_several_problems_names_each_on_its_own_line(workdir: Path) -> None:
    config = workdir / "bad.toml"
    config.write_text('[supervisor]\nbogus = 1\n[pools.mail]\nworkers = "two"\n')
    result = forkq(workdir, "status", "-c", str(config))
    assert result.returncode == 78
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("forkq: error: ") for line in lines)
    assert "supervisor.bogus" in lines[0] and "pools.mail.workers" in lines[1]


def test_a_named_config_file_that_is_missing_exits_78(workdir: Path, db_url: str) -> None:
    missing = workdir / "nope.toml"
    assert str(missing) in failed(forkq(workdir, "status", "-c", str(missing), database=db_url), 78)
    from_env = forkq(workdir, "status", database=db_url, FORKQ_CONFIG=str(missing))
    assert str(missing) in failed(from_env, 78)


def test_common_options_work_before_the_command(workdir: Path, db_url: str, store: Store) -> None:
    command = [sys.executable, "-m", "supervisor", "-c", "forkq.toml", "--database", db_url]
    env = forkq_env(workdir, db_url, FORKQ_DATABASE_URL="sqlite:///must-not-be-used.db")
    result = subprocess.run(
        [*command, "enqueue", "mail.send"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    row = store.get_job(int(ok(result)))
    assert row is not None and row.queue == "mail"  # -c before the command was honoured
    assert not (workdir / "must-not-be-used.db").exists()  # and so was --database


def test_debug_shows_the_traceback_that_a_plain_run_hides(workdir: Path, db_url: str) -> None:
    plain = forkq(workdir, "show", "424242", database=db_url)
    assert "no job with id 424242" in failed(plain, 1)
    debug = forkq(workdir, "show", "424242", "--debug", database=db_url)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr and "JobNotFound" in debug.stderr


def test_missing_tables_say_how_to_create_them(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'empty.db'}"
    line = failed(forkq(workdir, "status", database=url), 1)
    assert "forkq schema apply" in line


# --- operators ---------------------------------------------------------------------------------


def test_status_shows_queues_and_processes_of_every_host(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    for _ in range(3):
        queue.enqueue("mail.send", queue="mail")
    queue.enqueue("mail.send", queue="mail", delay=3600)
    dead_job(queue, store, queue="reports")
    store.register_process("host-b:4242:abcd", "host-b", 4242, "worker", pool="mail")
    text = ok(forkq(workdir, "status", database=db_url))
    lines = text.splitlines()
    assert lines[0].split() == [
        "QUEUE", "READY", "DELAYED", "RUNNING", "DEAD", "DONE", "OLDEST", "PAUSED"
    ]  # fmt: skip
    mail = next(line.split() for line in lines if line.startswith("mail "))
    assert mail[:6] == ["mail", "3", "1", "0", "0", "0"] and mail[-1] == "no"
    reports = next(line.split() for line in lines if line.startswith("reports "))
    assert reports[:6] == ["reports", "0", "0", "0", "1", "0"]
    host = next(line.split() for line in lines if line.startswith("host-b "))
    assert host[:4] == ["host-b", "4242", "worker", "mail"] and host[-1] == "ago"

    document = json.loads(ok(forkq(workdir, "status", "--json", database=db_url)))
    queues = {q["queue"]: q for q in document["queues"]}
    assert (queues["mail"]["ready"], queues["mail"]["delayed"]) == (3, 1)
    assert queues["reports"]["dead"] == 1 and queues["mail"]["paused"] is False
    assert queues["mail"]["oldest_ready_age"] >= 0
    (process,) = document["processes"]
    assert (process["host"], process["pid"], process["role"], process["pool"]) == (
        "host-b", 4242, "worker", "mail",
    )  # fmt: skip
    assert 0 <= process["heartbeat_age"] < 60


def test_jobs_filters_by_status_and_queue_and_limits(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    mail = [queue.enqueue("mail.send", {"i": i}, queue="mail") for i in range(3)]
    other = queue.enqueue("mail.send", queue="other")
    dead = dead_job(queue, store, queue="reports")

    def ids(*args: str) -> list[int]:
        return [
            j["id"]
            for j in json.loads(ok(forkq(workdir, "jobs", "--json", *args, database=db_url)))
        ]

    assert ids() == sorted([*mail, other, dead], reverse=True)
    assert ids("--queue", "mail") == sorted(mail, reverse=True)
    assert ids("--status", "dead") == [dead]
    assert ids("--status", "ready", "--queue", "other") == [other]
    assert ids("--limit", "2") == sorted([*mail, other, dead], reverse=True)[:2]
    text = ok(forkq(workdir, "jobs", "--status", "dead", database=db_url))
    header, row = text.splitlines()
    assert header.split()[:4] == ["ID", "STATUS", "QUEUE", "HANDLER"]
    assert row.split()[:4] == [str(dead), "dead", "reports", "mail.send"]
    assert "boom: it broke" in row and "line 2" not in row  # the first line of the error
    assert ok(forkq(workdir, "jobs", "--queue", "nothing-here", database=db_url)) == "no jobs\n"


def test_show_prints_every_field_including_the_last_error(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    job_id = dead_job(queue, store, unique_key="show-me", queue="reports")
    text = ok(forkq(workdir, "show", str(job_id), database=db_url))
    fields = {
        line.split()[0]: line.split(None, 1)[1:] for line in text.splitlines() if line[:1] != " "
    }
    for name in ("id", "queue", "handler", "payload", "status", "attempts", "unique_key", "run_at"):
        assert name in fields, name
    assert fields["status"] == ["dead"] and fields["unique_key"] == ["show-me"]
    assert "boom: it broke" in text and "  at line 2" in text

    document = json.loads(ok(forkq(workdir, "show", str(job_id), "--json", database=db_url)))
    assert document["id"] == job_id and document["status"] == "dead"
    assert document["last_error"] == "boom: it broke\n  at line 2"
    assert document["attempts"] == 1 and document["finished_at"]


def test_show_of_an_unknown_id_exits_1(workdir: Path, db_url: str) -> None:
    assert "no job with id 99999" in failed(forkq(workdir, "show", "99999", database=db_url), 1)


def test_retry_dead_makes_dead_jobs_ready_again(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    mail = dead_job(queue, store, queue="mail")
    reports = dead_job(queue, store, queue="reports")
    out = ok(forkq(workdir, "retry", "--dead", "--queue", "mail", database=db_url))
    assert "retried 1 dead job" in out
    assert [store.get_job(i).status for i in (mail, reports)] == ["ready", "dead"]  # type: ignore[union-attr]
    assert "retried 1 dead job" in ok(forkq(workdir, "retry", "--dead", database=db_url))
    row = store.get_job(reports)
    assert row is not None and row.status == JobState.READY and row.attempts == 0


def test_retry_by_id_names_the_jobs_it_could_not_retry(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    dead = dead_job(queue, store)
    running = queue.enqueue("mail.send", queue="busy")
    store.claim("busy", OWNER, 1, 60)
    result = forkq(workdir, "retry", str(dead), str(running), "987654", database=db_url)
    line = failed(result, 1)
    assert "retried 1 job" in result.stdout
    assert f"job {running} (running" in line and "job 987654 (no such job)" in line
    assert store.get_job(dead).status == JobState.READY  # type: ignore[union-attr]
    assert store.get_job(running).status == JobState.RUNNING  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "args", [["retry"], ["retry", "1", "--dead"], ["retry", "1", "--queue", "q"]]
)
def test_retry_needs_ids_or_dead(workdir: Path, db_url: str, args: list[str]) -> None:
    failed(forkq(workdir, *args, database=db_url), 2)


def test_cancel_ends_waiting_jobs_cancelled_and_marks_running_ones_cancelling(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    waiting = [queue.enqueue("mail.send"), queue.enqueue("mail.send", delay=3600)]
    running = queue.enqueue("mail.send", queue="busy")
    store.claim("busy", OWNER, 1, 60)
    out = ok(forkq(workdir, "cancel", *map(str, [*waiting, running]), database=db_url))
    assert "cancelled 2 jobs" in out and "cancelling 1 running job" in out
    rows = [store.get_job(i) for i in waiting]
    assert [r.status for r in rows if r] == [JobState.CANCELLED, JobState.CANCELLED]
    assert all(r and r.finished_at and "(forkq cancel)" in (r.last_error or "") for r in rows)
    row = store.get_job(running)
    assert row is not None and row.status == JobState.CANCELLING
    assert row.last_error and row.last_error.startswith("cancelled by ")


def test_cancel_refuses_done_dead_cancelled_and_unknown_jobs_with_exit_1(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    dead = dead_job(queue, store)
    cancelled = queue.enqueue("mail.send")
    assert queue.cancel(cancelled)
    waiting = queue.enqueue("mail.send")
    result = forkq(
        workdir, "cancel", str(dead), str(cancelled), str(waiting), "987654", database=db_url
    )
    line = failed(result, 1)
    assert "cancelled 1 job" in result.stdout
    assert f"job {dead} (dead)" in line and f"job {cancelled} (already cancelled)" in line
    assert "job 987654 (no such job)" in line
    assert store.get_job(dead).status == JobState.DEAD  # type: ignore[union-attr]
    assert store.get_job(waiting).status == JobState.CANCELLED  # type: ignore[union-attr]


def test_pause_and_resume_show_in_status(workdir: Path, db_url: str, store: Store) -> None:
    def paused() -> dict[str, bool]:
        document = json.loads(ok(forkq(workdir, "status", "--json", database=db_url)))
        return {q["queue"]: q["paused"] for q in document["queues"]}

    assert ok(forkq(workdir, "pause", "mail", database=db_url)) == "queue mail paused\n"
    assert paused()["mail"] is True and store.paused_queues() == {"mail"}
    text = ok(forkq(workdir, "status", database=db_url))
    assert next(line for line in text.splitlines() if line.startswith("mail ")).split()[-1] == "yes"
    assert ok(forkq(workdir, "resume", "mail", database=db_url)) == "queue mail resumed\n"
    assert paused().get("mail", False) is False and store.paused_queues() == set()


def test_purge_dead_older_than_deletes_only_old_enough_dead_jobs(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    dead = dead_job(queue, store)
    ready = queue.enqueue("mail.send")
    kept = queue.enqueue("mail.send", queue="kept")
    store.claim("kept", OWNER, 1, 60)
    store.complete(OWNER, [kept], "keep")
    assert "purged 0 dead" in ok(
        forkq(workdir, "purge", "--dead", "--older-than", "1h", database=db_url)
    )
    assert store.get_job(dead) is not None
    out = ok(forkq(workdir, "purge", "--dead", "--older-than", "0s", database=db_url))
    assert "purged 1 dead" in out and "done" not in out
    assert store.get_job(dead) is None
    assert store.get_job(ready) is not None and store.get_job(kept) is not None
    assert "purged 1 done" in ok(
        forkq(workdir, "purge", "--done", "--older-than", "0", database=db_url)
    )
    assert store.get_job(kept) is None and store.get_job(ready) is not None


def test_locks_lists_held_locks(workdir: Path, db_url: str, store: Store) -> None:
    assert store.try_lock("nightly-export", "host-a:1:cafe", 300)
    (lock,) = json.loads(ok(forkq(workdir, "locks", "--json", database=db_url)))
    assert (lock["name"], lock["owner"], lock["live"]) == ("nightly-export", "host-a:1:cafe", True)
    text = ok(forkq(workdir, "locks", database=db_url))
    assert text.splitlines()[1].split()[:2] == ["nightly-export", "host-a:1:cafe"]


def test_schedules_lists_cron_and_next_run(workdir: Path, db_url: str) -> None:
    (workdir / "forkq.toml").write_text(
        textwrap.dedent(
            """
            [supervisor]
            handlers = ["clihandlers"]
            [schedules.nightly]
            cron = "0 4 * * *"
            timezone = "Asia/Tokyo"
            handler = "mail.send"
            queue = "mail"
            """
        )
    )
    args = ("schedules", "--json", "-c", "forkq.toml")
    (entry,) = json.loads(ok(forkq(workdir, *args, database=db_url)))
    assert (entry["name"], entry["cron"], entry["timezone"]) == (
        "nightly",
        "0 4 * * *",
        "Asia/Tokyo",
    )
    assert entry["last_slot"] is None
    upcoming = datetime.fromisoformat(entry["next_run"])
    assert upcoming.astimezone(UTC).hour == 19 and upcoming > datetime.now(UTC)  # 04:00 JST
    assert upcoming - datetime.now(UTC) <= timedelta(days=1)


def test_alerts_test_without_channels_fails(workdir: Path) -> None:
    assert "no alert channel" in failed(forkq(workdir, "alerts", "test"), 1)


class _Hook(http.server.BaseHTTPRequestHandler):
    bodies: list[bytes] = []

    def do_POST(self) -> None:
        _Hook.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_alerts_test_reports_each_channel(workdir: Path) -> None:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    (workdir / "alerts.toml").write_text(
        f'[supervisor]\nhandlers = []\n[alerts]\nwebhook_url = "{url}"\n'
    )
    try:
        out = ok(forkq(workdir, "alerts", "test", "-c", "alerts.toml"))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    assert out.split()[:2] == ["ok", "webhook"]
    (body,) = _Hook.bodies
    assert "test alert" in json.loads(body)["text"]
    result = forkq(workdir, "alerts", "test", "-c", "alerts.toml")  # nobody listens now
    assert "webhook" in failed(result, 1)
    assert result.stdout.split()[:2] == ["FAIL", "webhook"]


# --- schema and check ------------------------------------------------------------------------


def test_schema_print_is_the_backends_ddl(workdir: Path, db_url: str) -> None:
    out = ok(forkq(workdir, "schema", "print", database=db_url))
    assert "CREATE TABLE IF NOT EXISTS forkq_jobs" in out
    expected = SCHEMA_SQL if parse_database_url(db_url).backend == "mysql" else SQLITE_SCHEMA_SQL
    assert out == expected.read_text(encoding="utf-8")


def test_schema_apply_is_idempotent_and_keeps_jobs(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    job_id = queue.enqueue("mail.send")
    for _ in range(2):
        out = ok(forkq(workdir, "schema", "apply", database=db_url))
        assert f"schema version {SCHEMA_VERSION} applied" in out
    assert store.get_job(job_id) is not None


def test_schema_apply_creates_the_tables_of_a_new_database(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'new.db'}"
    ok(forkq(workdir, "schema", "apply", database=url))
    assert sql(url, "SELECT version FROM forkq_schema") == [(SCHEMA_VERSION,)]


def test_check_passes_on_a_good_setup(workdir: Path, db_url: str) -> None:
    out = ok(forkq(workdir, "check", "-c", "forkq.toml", database=db_url))
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["ok", "config"], ["ok", "handlers"], ["ok", "database"], ["ok", "schema"]
    ]  # fmt: skip
    assert "clihandlers" in lines[1] and "1 registered" in lines[1]


def test_check_fails_on_an_unreachable_database_without_showing_the_password(
    workdir: Path,
) -> None:
    url = f"mysql://forkq:pw-Unreachable-7781@127.0.0.1:{free_tcp_port()}/app"
    result = forkq(workdir, "check", "-c", "forkq.toml", database=url, timeout=30)
    assert result.returncode == 1, (result.stdout, result.stderr)
    fail = next(line for line in result.stdout.splitlines() if line.startswith("FAIL"))
    assert fail.split()[1] == "database" and "unreachable" in fail
    assert "forkq:***@127.0.0.1" in fail
    assert result.stderr.strip() == "forkq: error: check failed: database"
    assert "pw-Unreachable-7781" not in result.stdout + result.stderr


def test_check_fails_on_missing_tables(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'empty.db'}"
    result = forkq(workdir, "check", "-c", "forkq.toml", database=url)
    assert result.returncode == 1
    assert any(line.split()[:2] == ["FAIL", "schema"] for line in result.stdout.splitlines())


BROKEN_MODULES = {
    "raises": (
        "raise RuntimeError('half-written\\nmodule')\n",
        "RuntimeError: half-written module",
    ),
    "imports-nothing": (
        "import no_such_module_anywhere\n",
        "ModuleNotFoundError: No module named 'no_such_module_anywhere'",
    ),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_MODULES))
def test_run_names_the_config_file_of_a_handler_module_that_fails_to_import(
    workdir: Path, broken: str
) -> None:
    source, reason = BROKEN_MODULES[broken]
    (workdir / "clihandlers.py").write_text(source)
    (workdir / "etc").mkdir()
    (workdir / "forkq.toml").rename(workdir / "etc" / "forkq.toml")
    url = f"sqlite:///{workdir / 'x.db'}"
    line = failed(forkq(workdir, "run", "-c", "etc/forkq.toml", database=url), 78)
    assert line == (
        "forkq: error: etc/forkq.toml: supervisor.handlers: module 'clihandlers'"
        f" failed to import: {reason}"
    )


@pytest.mark.parametrize("broken", sorted(BROKEN_MODULES))
def test_check_names_the_config_file_of_a_handler_module_that_fails_to_import(
    workdir: Path, broken: str
) -> None:
    source, reason = BROKEN_MODULES[broken]
    (workdir / "clihandlers.py").write_text(source)
    result = forkq(workdir, "check", "-c", "forkq.toml", database=f"sqlite:///{workdir / 'x.db'}")
    assert result.returncode == 78, (result.stdout, result.stderr)
    [line] = [line for line in result.stdout.splitlines() if line.split()[1] == "handlers"]
    assert line.split(None, 2) == [
        "FAIL",
        "handlers",
        f"forkq.toml: supervisor.handlers: module 'clihandlers' failed to import: {reason}",
    ]


def test_the_upgrade_statements_of_the_latest_version_are_none(workdir: Path) -> None:
    out = ok(forkq(workdir, "schema", "print", "--upgrade-from", str(SCHEMA_VERSION)))
    assert out == ""
    older = ok(forkq(workdir, "schema", "print", "--upgrade-from", str(SCHEMA_VERSION - 1)))
    assert older.endswith(";\n") and "CREATE TABLE IF NOT EXISTS forkq_jobs " not in older


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--upgrade-from", "two"], "expected a whole number, got 'two'"),
        (["--upgrade-from", "0"], "schema versions start at 1, got 0"),
        (["--upgrade-from", str(SCHEMA_VERSION + 1)], "is newer than this forkq's"),
        (["--upgrade-from"], "expected one argument"),
    ],
    ids=["not-a-number", "zero", "newer", "missing"],
)
def test_schema_print_refuses_a_bad_upgrade_from(
    workdir: Path, args: list[str], message: str
) -> None:
    line = failed(forkq(workdir, "schema", "print", *args), 2)
    assert "--upgrade-from" in line and message in line


def test_upgrade_from_only_goes_with_schema_print(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'x.db'}"
    line = failed(forkq(workdir, "schema", "apply", "--upgrade-from", "2", database=url), 2)
    assert "--upgrade-from" in line
    assert not (workdir / "x.db").exists()


def test_check_exits_78_on_a_bad_config(workdir: Path) -> None:
    (workdir / "clihandlers.py").write_text("import no_such_module_anywhere\n")
    result = forkq(workdir, "check", "-c", "forkq.toml", database=f"sqlite:///{workdir / 'x.db'}")
    assert result.returncode == 78
    assert any(line.split()[:2] == ["FAIL", "handlers"] for line in result.stdout.splitlines())
    (workdir / "forkq.toml").write_text("[supervisor]\nhandlers = 5\n")
    result = forkq(workdir, "check", "-c", "forkq.toml")
    assert result.returncode == 78 and "supervisor.handlers" in result.stdout


# --- secrets -----------------------------------------------------------------------------------

PASSWORD = "pw-Secret-4f1e9"
USER = "forkq_cli_pw"


@pytest.fixture
def password_url(mysql_db_url: str) -> Iterator[str]:
    """The test database through a MariaDB account that has a password."""
    conn = mysql_connect(mysql_db_url, database=False)
    name = database_name(mysql_db_url)
    try:
        with conn.cursor() as cursor:
            for host in ("%", "localhost", "127.0.0.1"):
                cursor.execute(
                    "CREATE OR REPLACE USER %s@%s IDENTIFIED BY %s", (USER, host, PASSWORD)
                )
                cursor.execute(f"GRANT ALL ON `{name}`.* TO %s@%s", (USER, host))
        server = parse_database_url(mysql_db_url)
        yield f"mysql://{USER}:{PASSWORD}@{server.host}:{server.port}/{name}"
    finally:
        with conn.cursor() as cursor:
            for host in ("%", "localhost", "127.0.0.1"):
                cursor.execute("DROP USER IF EXISTS %s@%s", (USER, host))
        conn.close()


def test_the_database_password_never_appears_in_output(
    workdir: Path, password_url: str, mysql_db_url: str
) -> None:
    store = open_store(password_url)
    try:
        job_id = Queue(store=store).enqueue("mail.send", {"n": 1})
        store.register_process("host-c:7:beef", "host-c", 7, "master")
    finally:
        store.close()
    outputs = []
    for args in (
        ["status"], ["status", "--json"], ["check", "-c", "forkq.toml"], ["jobs"],
        ["show", str(job_id)], ["schema", "apply"], ["show", "55555", "--debug"],
    ):  # fmt: skip
        result = forkq(workdir, *args, database=password_url)
        assert result.returncode == (1 if "55555" in args else 0), (args, result.stderr)
        outputs.append(result.stdout + result.stderr)
    wrong = password_url.replace(PASSWORD, PASSWORD + "-wrong")
    denied = forkq(workdir, "check", "-c", "forkq.toml", database=wrong)
    assert denied.returncode == 1 and "Access denied" in denied.stdout
    outputs.append(denied.stdout + denied.stderr)
    assert f"{USER}:***@" in outputs[2]  # check shows the URL, redacted
    assert all(PASSWORD not in text for text in outputs)


# --- in-process: what no subprocess can be made to do on purpose ------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_exception_is_one_line_unless_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], debug: bool
) -> None:
    def explode(*args: Any, **kwargs: Any) -> Store:
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(cli.logs, "setup", lambda **kwargs: None)
    monkeypatch.setattr(commands, "open_store", explode)
    argv = ["status", "--database", "sqlite:///unused.db"] + (["--debug"] if debug else [])
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("forkq: internal error: RuntimeError: disk on fire second line")
    assert ("Traceback" in err) is debug
    if not debug:
        assert err.count("\n") == 1 and "run with --debug" in last


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Store:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.logs, "setup", lambda **kwargs: None)
    monkeypatch.setattr(commands, "open_store", interrupted)
    assert cli.main(["jobs", "--database", "sqlite:///unused.db"]) == 130
