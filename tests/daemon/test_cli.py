"""`forkq` as users run it: a real subprocess, its exit codes, its output, what it stored.

Enqueue, usage and config errors, and the operators' commands; `forkq schema`, `forkq
check`, secrets and what only an in-process run can show are in test_cli_schema.py.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import textwrap
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli_util import (
    HANDLER_MODULE,
    OWNER,
    dead_job,
    failed,
    forkq,
    forkq_env,
    ok,
    workdir_fixture,  # noqa: F401  (the `workdir` fixture)
)

from supervisor import Queue
from supervisor.models import JobState
from supervisor.store import Store

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
        "--group-key",
        "shop-9",
        database=db_url,
    )
    job_id = int(ok(out).strip())
    row = store.get_job(job_id)
    assert row is not None
    assert (row.handler, row.queue, row.priority) == ("mail.send", "urgent", 7)
    assert json.loads(row.payload) == {"to": "a@example.com", "n": [1, 2]}
    assert (row.unique_key, row.max_attempts, row.status) == ("welcome-42", 3, JobState.SCHEDULED)
    assert row.group_key == "shop-9"
    assert row.run_at - row.enqueued_at > timedelta(minutes=59)


def test_enqueue_reads_a_payload_of_dash_from_stdin(
    workdir: Path, db_url: str, store: Store
) -> None:
    # A payload past the 128 KB a single argument may hold (`Argument list too long`)
    payload = {"rows": ["x" * 100] * 2000}
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "enqueue", "mail.send", "-", "--database", db_url],
        cwd=workdir, env=forkq_env(workdir, db_url), input=json.dumps(payload),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    row = store.get_job(int(ok(result)))
    assert row is not None and json.loads(row.payload) == payload


def test_a_line_a_handler_module_logs_goes_to_stderr_not_into_the_output(
    workdir: Path, db_url: str, store: Store
) -> None:
    # As supervisor.contrib.django logs django_ready when it loads: stdout is the output.
    (workdir / "loud.py").write_text(
        HANDLER_MODULE + "\nfrom supervisor import logs\nlogs.get().info('loud_ready')\n"
    )
    (workdir / "forkq.toml").write_text('[supervisor]\nhandlers = ["loud"]\n')
    result = forkq(workdir, "enqueue", "mail.send", "{}", "-c", "forkq.toml", database=db_url)
    job_id = int(ok(result))  # the id alone, nothing else on stdout
    assert '"loud_ready"' in result.stderr
    shown = forkq(workdir, "show", str(job_id), "--json", "-c", "forkq.toml", database=db_url)
    assert json.loads(ok(shown))["id"] == job_id


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
    [
        [],
        ["frobnicate"],
        ["status", "--no-such-flag"],
        ["jobs", "--limit", "0"],
        ["show", "x"],
        ["show", "१२"],
    ],
    ids=["no-command", "unknown-command", "bad-flag", "bad-limit", "bad-id", "non-ascii-digits"],
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
    assert f"{missing}: file not found (named by FORKQ_CONFIG)" in failed(from_env, 78)


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
    (workdir / "empty.db").touch()  # an empty SQLite database: no tables
    url = f"sqlite:///{workdir / 'empty.db'}"
    line = failed(forkq(workdir, "status", database=url), 1)
    # The command it suggests reaches the same database as written (the default is another)
    suggested = line.split("`")[1]
    assert suggested == f"forkq schema apply --database {url}", line
    assert subprocess.run(
        [sys.executable, "-m", "supervisor", *suggested.split()[1:]],
        cwd=workdir, env=forkq_env(workdir), capture_output=True, check=False,
    ).returncode == 0  # fmt: skip
    ok(forkq(workdir, "status", database=url))
    # With a config file: the same -c; a URL with a password is never repeated
    (workdir / "other.toml").write_text(f'[database]\nurl = "{url}x"\n')
    line = failed(forkq(workdir, "status", "-c", "other.toml"), 1)
    assert "`forkq schema apply -c other.toml`" in line, line
    secret = "mysql://u:s3cret@127.0.0.1:1/x"
    line = failed(forkq(workdir, "status", "-c", "other.toml", database=secret), 1)
    assert "s3cret" not in line


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
        "QUEUE", "READY", "DELAYED", "RUNNING", "DEAD", "DONE", "CANCELLED", "OLDEST", "PAUSED"
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
    # Pages: a full one says (on stderr) how to list the one after it, which is --before.
    newest = sorted([*mail, other, dead], reverse=True)
    assert ids("--limit", "2", "--before", str(newest[1])) == newest[2:4]
    page = forkq(workdir, "jobs", "--queue", "mail", "--limit", "2", database=db_url)
    older = sorted(mail, reverse=True)[1]
    said = f"older: `forkq jobs --queue mail --limit 2 --before {older} --database "
    assert page.stderr.startswith(said), page.stderr
    assert ok(page).count("\n") == 3  # the header and two jobs: the hint is not in the table
    # The last page, full or not, points to no page after it (it would list nothing).
    for size in (len(newest), len(newest) + 1):
        last = forkq(workdir, "jobs", "--limit", str(size), database=db_url)
        assert ok(last).count("\n") == len(newest) + 1 and "older:" not in last.stderr


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


def test_show_prints_every_empty_field_as_a_dash(workdir: Path, db_url: str, queue: Queue) -> None:
    """Before: an empty limit_wait (a job parked on no limit) was printed as a blank."""
    job_id = queue.enqueue("mail.send")
    text = ok(forkq(workdir, "show", str(job_id), database=db_url))
    fields = {line.split()[0]: line.split()[1:] for line in text.splitlines()}
    assert fields["limit_wait"] == ["-"] and fields["unique_key"] == ["-"]
    assert [name for name, value in fields.items() if not value] == []
    document = json.loads(ok(forkq(workdir, "show", str(job_id), "--json", database=db_url)))
    assert document["limit_wait"] == "" and document["unique_key"] is None  # types kept


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


def test_retry_dead_names_a_job_whose_unique_key_another_job_holds(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    """As `retry ID` does: it stays dead, is named with its holder on stderr, exit 1; the
    count says only what was retried."""
    held = dead_job(queue, store, queue="mail", unique_key="kd", unique_while="queued")
    plain = dead_job(queue, store, queue="mail")
    holder = queue.enqueue("mail.send", queue="idle", unique_key="kd", unique_while="queued")
    result = forkq(workdir, "retry", "--dead", "--queue", "mail", database=db_url)
    line = failed(result, 1)
    assert "retried 1 dead job" in result.stdout
    assert f"not retried: job {held} (its unique key is held by job {holder})" in line
    assert [store.get_job(i).status for i in (held, plain)] == ["dead", "ready"]  # type: ignore[union-attr]


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
    assert out == "cancelled 2 jobs\ncancelling 1 running job: stopped within 2 s where it runs\n"
    rows = [store.get_job(i) for i in waiting]
    assert [r.status for r in rows if r] == [JobState.CANCELLED, JobState.CANCELLED]
    assert all(r and r.finished_at and "(forkq cancel)" in (r.last_error or "") for r in rows)
    row = store.get_job(running)
    assert row is not None and row.status == JobState.CANCELLING
    assert row.last_error and row.last_error.startswith("cancelled by ")


def test_cancel_of_running_jobs_alone_says_only_that_they_are_being_cancelled(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    """Before: `cancelled 0 jobs` first, as if nothing had been done."""
    running = [queue.enqueue("mail.send", queue="busy") for _ in range(2)]
    store.claim("busy", OWNER, 2, 60)
    out = ok(forkq(workdir, "cancel", str(running[0]), database=db_url))
    assert out == "cancelling 1 running job: stopped within 2 s where it runs\n"
    out = ok(forkq(workdir, "cancel", str(running[1]), database=db_url))
    assert out == "cancelling 1 running job: stopped within 2 s where it runs\n"
    dead = dead_job(queue, store)
    result = forkq(workdir, "cancel", str(dead), database=db_url)
    assert failed(result, 1) == f"forkq: error: not cancelled: job {dead} (dead)"
    assert result.stdout == "cancelled 0 jobs\n"


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
    # A typo resumes nothing, and says so (it said "resumed").
    assert ok(forkq(workdir, "resume", "mial", database=db_url)) == "queue mial was not paused\n"


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
    assert "purged 1 dead job finished" in out and "done" not in out
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
    before = datetime.now(UTC)  # the CLI reads its clock after this, the test after it ends
    (entry,) = json.loads(ok(forkq(workdir, *args, database=db_url)))
    assert (entry["name"], entry["cron"], entry["timezone"]) == (
        "nightly",
        "0 4 * * *",
        "Asia/Tokyo",
    )
    assert entry["last_slot"] is None
    upcoming = datetime.fromisoformat(entry["next_run"])
    assert upcoming.astimezone(UTC).hour == 19 and upcoming > before  # 04:00 JST
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


def test_purge_removes_cancelled_jobs_too(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    """SPEC: dead and cancelled jobs stay until retried or purged; `purge` had no way to
    remove a cancelled one."""
    cancelled = queue.enqueue("mail.send")
    assert queue.cancel(cancelled)
    ready = queue.enqueue("mail.send")
    out = ok(forkq(workdir, "purge", "--cancelled", "--older-than", "0", database=db_url))
    assert out == "purged 1 cancelled job finished more than 0s ago\n"
    assert store.get_job(cancelled) is None and store.get_job(ready) is not None
    again = queue.enqueue("mail.send")
    assert queue.cancel(again)
    out = ok(forkq(workdir, "purge", "--older-than", "0", database=db_url))  # every status
    assert out == "purged 0 done, 0 dead and 1 cancelled jobs finished more than 0s ago\n"
    assert store.get_job(again) is None and store.get_job(ready) is not None
