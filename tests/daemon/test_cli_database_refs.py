"""`--database NAME` with a plain job id: the id is that database's, never the home
job that happens to have the same number (ids are per database); a `NAME:ID` of another
database than the one picked is refused. Found by review: `forkq cancel 1 --database
reports` cancelled the home database's job 1."""

from __future__ import annotations

import json
import re
from pathlib import Path

from cli_util import failed, ok
from test_cli_databases import SECRET, forkq, workdir, write_config  # noqa: F401 (workdir)
from util import free_tcp_port

from supervisor import Queue


def _same_number(workdir: Path) -> int:  # noqa: F811
    """A number that is the id of a reports job and of a home job (a different job)."""
    report = ok(forkq(workdir, "enqueue", "report.build", '{"day": 1}')).strip()
    number = int(report.removeprefix("reports:"))
    for _ in range(number + 2):
        if int(ok(forkq(workdir, "enqueue", "mail.send", "{}"))) >= number:
            break
    assert json.loads(ok(forkq(workdir, "show", str(number), "--json")))["queue"] == "mail"
    return number


def test_a_plain_id_is_the_picked_databases_job(workdir: Path) -> None:  # noqa: F811
    number = _same_number(workdir)
    shown = json.loads(ok(forkq(workdir, "show", str(number), "--database", "reports", "--json")))
    assert (shown["database"], shown["queue"]) == ("reports", "reports")
    ok(forkq(workdir, "cancel", str(number), "--database", "reports"))
    home = json.loads(ok(forkq(workdir, "show", str(number), "--json")))
    assert home["status"] == "ready", home  # the home job with that number is untouched
    report = json.loads(ok(forkq(workdir, "show", f"reports:{number}", "--json")))
    assert report["status"] == "cancelled"
    assert ok(forkq(workdir, "retry", str(number), "--database", "reports")) == "retried 1 job\n"
    line = failed(forkq(workdir, "cancel", f"reports:{number}", "--database", "default"), 2)
    assert f"job reports:{number} is in database reports, not default (--database)" in line
    assert json.loads(ok(forkq(workdir, "show", str(number), "--json")))["status"] == "ready"


def test_a_reference_to_a_database_the_config_lacks_is_refused(workdir: Path) -> None:  # noqa: F811
    """On a host whose config has one database, `reports:1` (copied from another host)
    is refused, never read or acted on as the home job 1."""
    ok(forkq(workdir, "enqueue", "mail.send", "{}", config="home.toml"))
    for command in ("show", "batch", "cancel", "retry"):
        line = failed(forkq(workdir, command, "reports:1", config="home.toml"), 2)
        assert "no database named 'reports' (there are: default)" in line, (command, line)
    assert json.loads(ok(forkq(workdir, "show", "1", "--json", config="home.toml")))["id"] == 1


def test_cancel_and_retry_say_what_they_did_when_a_database_is_down(
    workdir: Path,  # noqa: F811
    two_db_urls: tuple[str, str],
) -> None:
    """The home job is cancelled and said so; the down database's job is named as not
    cancelled, with why (never its password), exit 1. Before: one error line, and the
    home job cancelled without a word."""
    home, _ = two_db_urls
    down = f"mysql://forkq:{SECRET}@127.0.0.1:{free_tcp_port()}/nothing"
    write_config(workdir, "down.toml", home, down)
    job = ok(forkq(workdir, "enqueue", "mail.send", "{}", config="down.toml")).strip()
    result = forkq(workdir, "cancel", job, "reports:1", config="down.toml")
    assert (result.returncode, result.stdout) == (1, "default: cancelled 1 job\n"), result
    warning, error = result.stderr.splitlines()
    assert warning.startswith("forkq: warning: reports: unreachable: ")
    assert error == "forkq: error: not cancelled: job reports:1 (database reports did not answer)"
    result = forkq(workdir, "retry", job, "reports:1", config="down.toml")
    assert (result.returncode, result.stdout) == (1, "retried 1 job\n"), result
    assert result.stderr.splitlines()[-1] == (
        "forkq: error: not retried: job reports:1 (database reports did not answer)"
    )
    assert SECRET not in result.stderr


def test_a_schedule_is_changed_while_another_database_is_down(
    workdir: Path,  # noqa: F811
    two_db_urls: tuple[str, str],
) -> None:
    """Looking for the database that has a schedule, one that does not answer is warned of
    and skipped: the home schedule is paused. Before: a bare `database unreachable`."""
    home, _ = two_db_urls
    write_config(workdir, "down.toml", home, f"mysql://u:{SECRET}@127.0.0.1:{free_tcp_port()}/x")
    added = ok(forkq(workdir, "schedule", "add", "mailer", "--cron", "0 4 * * *",
                     "--handler", "mail.send", config="down.toml"))  # fmt: skip
    assert added == "schedule mailer added in default\n"
    paused = forkq(workdir, "schedule", "pause", "mailer", config="down.toml")
    assert (paused.returncode, paused.stdout) == (0, "schedule mailer paused\n"), paused
    assert paused.stderr.startswith("forkq: warning: reports: unreachable: ")
    missing = forkq(workdir, "schedule", "pause", "nosuch", config="down.toml")
    assert missing.returncode == 1 and missing.stderr.splitlines()[-1] == (
        "forkq: error: 1 database did not answer: reports"
    )
    assert SECRET not in paused.stderr + missing.stderr


def test_show_names_a_reports_jobs_batch_as_forkq_batch_takes_it(
    workdir: Path,  # noqa: F811
    two_db_urls: tuple[str, str],
) -> None:
    """`batch_id` of a job outside the home database is its reference (as its parents are),
    so `forkq batch` given what `forkq show` says asks the right database."""
    _, reports = two_db_urls
    producer = Queue(reports, wake=False)
    try:
        with producer.batch(on_complete="report.done") as batch:
            job = batch.enqueue("report.build", {"day": 1}, queue="reports")
    finally:
        producer.close()
    shown = json.loads(ok(forkq(workdir, "show", f"reports:{job}", "--json")))
    assert shown["batch_id"] == f"reports:{batch.id}"
    assert re.search(
        rf"^batch_id +reports:{batch.id}$", ok(forkq(workdir, "show", f"reports:{job}")), re.M
    )
    assert ok(forkq(workdir, "batch", shown["batch_id"])).startswith(f"batch reports:{batch.id}: ")


def test_a_schedule_name_is_one_across_the_databases(workdir: Path) -> None:  # noqa: F811
    """`schedule add NAME` is refused when another database has NAME (the file's or a
    runtime one): it was added, and then both ran and every change needed --database."""
    config = workdir / "forkq.toml"
    config.write_text(
        config.read_text() + '[schedules.filed]\ncron = "0 5 * * *"\nhandler = "report.build"\n'
    )
    ok(
        forkq(
            workdir,
            "schedule",
            "add",
            "nightly",
            "--cron",
            "0 4 * * *",
            "--handler",
            "report.build",
        )
    )
    line = failed(
        forkq(workdir, "schedule", "add", "filed", "--cron", "0 1 * * *", "--handler", "mail.send"),
        2,
    )
    assert "schedule 'filed' is defined in " in line, line
    line = failed(
        forkq(
            workdir, "schedule", "add", "nightly", "--cron", "0 1 * * *", "--handler", "mail.send"
        ),
        2,
    )
    assert (
        line
        == "forkq: error: schedule 'nightly' is in database reports already: a name is one schedule"
    )
    listed = json.loads(ok(forkq(workdir, "schedules", "--json")))
    assert sorted((s["name"], s["database"]) for s in listed) == [
        ("filed", "reports"),
        ("nightly", "reports"),
    ]


def test_an_error_says_which_database(workdir: Path, two_db_urls: tuple[str, str]) -> None:  # noqa: F811
    """With several databases, a command on one that does not answer names it."""
    home, _ = two_db_urls
    write_config(workdir, "down.toml", home, f"mysql://u:{SECRET}@127.0.0.1:{free_tcp_port()}/x")
    for command in (("show", "reports:1"), ("enqueue", "report.build", "{}"), ("pause", "reports")):
        line = failed(forkq(workdir, *command, config="down.toml"), 1)
        assert line.startswith("forkq: error: reports: database unreachable: "), line
        assert SECRET not in line
    jobs = forkq(workdir, "jobs", config="down.toml")
    assert jobs.stderr.startswith("forkq: warning: reports: unreachable: (")
