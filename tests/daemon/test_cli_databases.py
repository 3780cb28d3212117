"""`forkq` over several databases ([databases.NAME]): enqueue goes to the queue's
database and prints `NAME:ID`; show/cancel/retry take it; jobs, schedules, purge and
status cover every database, labelled, and `--database NAME` picks one; a database that
does not answer is named as such while the others are shown (exit 1), never with its
password. The jobs are run by a real `forkq work` per database (each is a whole forkq
installation)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_util import failed, ok
from util import free_tcp_port, subprocess_env

from supervisor import Queue
from supervisor.store import open_store

HANDLERS = """
from supervisor import handler

@handler("report.build", queue="reports", keep_result=True)
def build(payload, job):
    return {"day": payload["day"]}

@handler("mail.send", queue="mail")
def send(payload, job):
    return None
"""
POOLS = '[pools.mail]\non_success = "keep"\n[pools.reports]\non_success = "keep"\n'
SECRET = "pw-Xy7-never-shown"


def write_config(workdir: Path, name: str, home: str, reports: str | None) -> Path:
    """A config naming the handler module; with `reports`, queue "reports" lives there."""
    text = f'[supervisor]\nhandlers = ["multihandlers"]\n[database]\nurl = "{home}"\n' + POOLS
    if reports is not None:
        text += f'[databases.reports]\nurl = "{reports}"\nqueues = ["reports"]\n'
    path = workdir / name
    path.write_text(text)
    return path


@pytest.fixture
def workdir(tmp_path: Path, two_db_urls: tuple[str, str]) -> Path:
    home, reports = two_db_urls
    (tmp_path / "multihandlers.py").write_text(HANDLERS)
    write_config(tmp_path, "forkq.toml", home, reports)
    write_config(tmp_path, "home.toml", home, None)  # each database as its own installation
    write_config(tmp_path, "reports.toml", reports, None)
    return tmp_path


def forkq(
    workdir: Path, *args: str, config: str = "forkq.toml"
) -> subprocess.CompletedProcess[str]:
    env = subprocess_env("unused")
    env.pop("FORKQ_DATABASE_URL", None)  # the config's URLs, not the suite's
    env.pop("FORKQ_CONFIG", None)
    env["PYTHONPATH"] = f"{workdir}:{env['PYTHONPATH']}"
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args, "-c", str(workdir / config)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_enqueue_routes_and_refs_name_jobs(workdir: Path, two_db_urls: tuple[str, str]) -> None:
    report = ok(forkq(workdir, "enqueue", "report.build", '{"day": 3}')).strip()
    mail = ok(forkq(workdir, "enqueue", "mail.send", "{}")).strip()
    other = ok(forkq(workdir, "enqueue", "mail.send", "{}", "--queue", "reports")).strip()
    assert re.fullmatch(r"reports:\d+", report) and re.fullmatch(r"reports:\d+", other), report
    assert re.fullmatch(r"\d+", mail), mail  # the home database: a plain id, as ever

    shown = json.loads(ok(forkq(workdir, "show", report, "--json")))
    assert (shown["database"], shown["ref"], shown["queue"]) == ("reports", report, "reports")
    assert json.loads(ok(forkq(workdir, "show", mail, "--json")))["handler"] == "mail.send"
    assert re.match(rf"database +reports\nref +{report}\nid ", ok(forkq(workdir, "show", report)))

    listed = json.loads(ok(forkq(workdir, "jobs", "--json")))
    assert sorted((j["database"], j["ref"]) for j in listed) == sorted(
        [("default", mail), ("reports", report), ("reports", other)]
    )
    table = ok(forkq(workdir, "jobs"))
    assert table.splitlines()[0].split()[:2] == ["DATABASE", "ID"]
    assert report in table and f"default   {mail}" in table
    only = json.loads(ok(forkq(workdir, "jobs", "--json", "--database", "reports")))
    assert {j["database"] for j in only} == {"reports"} and len(only) == 2
    assert len(json.loads(ok(forkq(workdir, "jobs", "--json", "--queue", "mail")))) == 1

    assert ok(forkq(workdir, "cancel", other, mail)) == (
        "reports: cancelled 1 job\ndefault: cancelled 1 job\n"  # in the order given
    )
    assert ok(forkq(workdir, "retry", other)) == "retried 1 job\n"
    line = failed(forkq(workdir, "cancel", f"{report.split(':')[0]}:999999"), 1)
    assert "job reports:999999" in line
    line = failed(forkq(workdir, "show", "nowhere:1"), 2)
    assert "no database named 'nowhere' (there are: default, reports)" in line
    line = failed(forkq(workdir, "jobs", "--database", "nowhere"), 2)
    assert "no database named 'nowhere'" in line


def test_a_dependency_across_databases_is_failed(workdir: Path) -> None:
    mail = ok(forkq(workdir, "enqueue", "mail.send", "{}")).strip()
    line = failed(forkq(workdir, "enqueue", "report.build", '{"day": 1}', "--depends-on", mail), 2)
    assert "a job's parents must be in its database" in line and "default" in line
    report = ok(forkq(workdir, "enqueue", "report.build", '{"day": 1}')).strip()
    child = ok(forkq(workdir, "enqueue", "report.build", '{"day": 2}', "--depends-on", report))
    assert json.loads(ok(forkq(workdir, "show", child.strip(), "--json")))["status"] == "waiting"


def test_the_daemon_and_the_dashboard_serve_every_database_not_one(workdir: Path) -> None:
    for command in ("run", "web"):
        line = failed(forkq(workdir, command, "--database", "reports"), 2)
        assert "every database" in line, line


def test_each_database_drains_with_its_own_worker(workdir: Path) -> None:
    report = ok(forkq(workdir, "enqueue", "report.build", '{"day": 5}')).strip()
    mail = ok(forkq(workdir, "enqueue", "mail.send", "{}")).strip()
    ok(forkq(workdir, "work", "--burst", config="home.toml"))
    assert json.loads(ok(forkq(workdir, "show", report, "--json")))["status"] == "ready"
    ok(forkq(workdir, "work", "--burst", config="reports.toml"))
    for ref in (report, mail):
        assert json.loads(ok(forkq(workdir, "show", ref, "--json")))["status"] == "done"
    assert json.loads(ok(forkq(workdir, "show", report, "--json")))["result"]["value"] == {"day": 5}
    purged = ok(forkq(workdir, "purge", "--older-than", "0"))
    assert purged.splitlines() == [
        "default: purged 1 done, 0 dead and 0 cancelled jobs finished more than 0s ago",
        "reports: purged 1 done, 0 dead and 0 cancelled jobs finished more than 0s ago",
    ]


def test_a_schedule_lives_in_its_queues_database(workdir: Path) -> None:
    added = ok(forkq(workdir, "schedule", "add", "nightly", "--cron", "0 4 * * *",
                     "--handler", "report.build", "--payload", '{"day": 0}'))  # fmt: skip
    assert added == "schedule nightly added in reports\n"
    listed = json.loads(ok(forkq(workdir, "schedules", "--json")))
    assert [(s["name"], s["database"]) for s in listed] == [("nightly", "reports")]
    assert ok(forkq(workdir, "schedule", "pause", "nightly")) == "schedule nightly paused\n"
    table = ok(forkq(workdir, "schedule", "list", "--database", "reports"))
    assert table.splitlines()[1].split()[:2] == ["reports", "nightly"]
    assert ok(forkq(workdir, "schedules", "--database", "default")) == "no schedules configured\n"


def test_status_shows_every_database(workdir: Path) -> None:
    ok(forkq(workdir, "enqueue", "report.build", '{"day": 5}'))
    ok(forkq(workdir, "pause", "reports"))
    text = ok(forkq(workdir, "status"))
    assert text.startswith("database default: ")
    assert "\ndatabase reports: " in text
    reports_part = text.split("\ndatabase reports: ")[1]
    assert re.search(r"^reports\s+1\s+0\s+0\s+0\s+0\s+0\s+\S+\s+yes$", reports_part, re.M)
    document = json.loads(ok(forkq(workdir, "status", "--json")))
    assert [d["name"] for d in document["databases"]] == ["default", "reports"]
    assert document["unreachable"] == [] and all(d["reachable"] for d in document["databases"])


def test_status_names_a_database_that_does_not_answer(
    workdir: Path, two_db_urls: tuple[str, str]
) -> None:
    home, _ = two_db_urls
    down = f"mysql://forkq:{SECRET}@127.0.0.1:{free_tcp_port()}/nothing"  # a closed port
    write_config(workdir, "down.toml", home, down)
    ok(forkq(workdir, "enqueue", "mail.send", "{}", config="down.toml"))  # home still takes jobs
    result = forkq(workdir, "status", config="down.toml")
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout.startswith("database default: ")
    assert re.search(r"^mail\s+1\s", result.stdout, re.M)  # the home database is shown
    assert re.search(r"^reports: unreachable: .+", result.stdout, re.M), result.stdout
    assert result.stderr == "forkq: error: 1 database did not answer: reports\n"
    document = forkq(workdir, "status", "--json", config="down.toml")
    assert document.returncode == 1
    parsed = json.loads(document.stdout)
    assert parsed["unreachable"] == ["reports"]
    [gone] = [d for d in parsed["databases"] if d["name"] == "reports"]
    assert gone["reachable"] is False and gone["error"] and gone["queues"] == []
    assert gone["database"].endswith("@127.0.0.1:" + down.split(":")[-1].split("/")[0] + "/nothing")
    assert "mail.send" in ok(forkq(workdir, "jobs", "--database", "default", config="down.toml"))
    jobs = forkq(workdir, "jobs", config="down.toml")  # the others listed, the down one named
    assert jobs.returncode == 1 and "mail.send" in jobs.stdout
    assert jobs.stderr.splitlines()[0].startswith("forkq: warning: reports: unreachable: ")
    assert jobs.stderr.splitlines()[1] == "forkq: error: 1 database did not answer: reports"
    outputs = (result, document, jobs)
    for output in [o.stdout for o in outputs] + [o.stderr for o in outputs]:
        assert SECRET not in output
        assert ":forkq@" not in output  # the suite's own password neither


def test_batch_takes_a_reference(workdir: Path, two_db_urls: tuple[str, str]) -> None:
    _, reports = two_db_urls
    producer = Queue(reports, wake=False)  # the reports database's own producer
    try:
        with producer.batch(on_complete="report.done") as batch:
            batch.enqueue("report.build", {"day": 1}, queue="reports")
    finally:
        producer.close()
    ref = f"reports:{batch.id}"
    assert ok(forkq(workdir, "batch", ref)).startswith(f"batch {ref}: open\n")
    document = json.loads(ok(forkq(workdir, "batch", ref, "--json")))
    assert (document["database"], document["total"]) == ("reports", 1)
    assert "no batch with id" in failed(forkq(workdir, "batch", str(batch.id + 1000)), 1)


def test_cancel_says_per_database_what_it_did(workdir: Path, two_db_urls: tuple[str, str]) -> None:
    """A waiting home job, a running reports job: each database's line says which."""
    _, reports = two_db_urls
    mail = ok(forkq(workdir, "enqueue", "mail.send", "{}")).strip()
    report = ok(forkq(workdir, "enqueue", "report.build", '{"day": 1}')).strip()
    store = open_store(reports)
    try:
        assert [j.id for j in store.claim("reports", "test-host:1:feedbeef", 1, 60)] == [
            int(report.removeprefix("reports:"))
        ]
    finally:
        store.close()
    assert ok(forkq(workdir, "cancel", mail, report)) == (
        "default: cancelled 1 job\n"
        "reports: cancelling 1 running job: stopped within 2 s where it runs\n"
    )
