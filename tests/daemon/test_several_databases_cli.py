"""`forkq schema apply`, `forkq check` and `forkq work` with `[databases.NAME]`: each
acts on every database (or on the one its queues live in), naming each; one that does
not answer is named and the command fails after doing the others."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from util import REPO_ROOT, count_rows, free_tcp_port, sqlite_url_for

from supervisor import Queue
from supervisor.store import SCHEMA_VERSION

HANDLERS = """\
import os

from supervisor import handler


@handler("m.where")
def where(payload, job):
    with open(payload["file"], "a") as out:
        out.write(f"{job.id},{job.queue}\\n")
"""


def forkq(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKQ_")}
    env["PYTHONPATH"] = os.pathsep.join([str(directory), str(REPO_ROOT)])
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args, "-c", str(directory / "forkq.toml")],
        env=env,
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def write_config(directory: Path, home: str, databases: dict[str, tuple[str, str]]) -> None:
    text = f'[database]\nurl = "{home}"\n\n[supervisor]\nhandlers = ["clihandlers"]\n'
    text += "\n[pools.alpha]\nworkers = 1\n"
    for name, (url, queue) in databases.items():
        text += f'\n[databases.{name}]\nurl = "{url}"\nqueues = ["{queue}"]\n'
        text += f"\n[pools.{queue}]\nworkers = 1\n"
    (directory / "forkq.toml").write_text(text)
    (directory / "clihandlers.py").write_text(HANDLERS)


def test_schema_apply_and_check_cover_every_database(tmp_path: Path) -> None:
    home, other = sqlite_url_for(tmp_path / "home.db"), sqlite_url_for(tmp_path / "other.db")
    lost = f"mysql://forkq:secret@127.0.0.1:{free_tcp_port()}/lost"  # nothing listens there
    write_config(tmp_path, home, {"other": (other, "beta"), "lost": (lost, "gamma")})

    applied = forkq(tmp_path, "schema", "apply")
    assert applied.returncode == 1, applied
    assert "applied to default: " in applied.stdout and "applied to other: " in applied.stdout
    assert "lost: " in applied.stderr and "schema not applied to lost" in applied.stderr
    assert count_rows(home, "forkq_jobs") == 0 and count_rows(other, "forkq_jobs") == 0

    checked = forkq(tmp_path, "check")
    assert checked.returncode == 1, checked
    lines = checked.stdout.splitlines()
    assert any(line.startswith("ok    database  default: ") for line in lines), lines
    assert any(line.startswith("ok    schema    other: version") for line in lines), lines
    assert any(line.startswith("FAIL  database  lost: ") for line in lines), lines
    assert "database (lost)" in checked.stderr
    assert "secret" not in applied.stderr + checked.stdout + checked.stderr

    write_config(tmp_path, home, {"other": (other, "beta")})
    assert forkq(tmp_path, "check").returncode == 0


def test_forkq_work_refuses_queues_of_two_databases(tmp_path: Path) -> None:
    home, other = sqlite_url_for(tmp_path / "home.db"), sqlite_url_for(tmp_path / "other.db")
    write_config(tmp_path, home, {"other": (other, "beta")})
    assert forkq(tmp_path, "schema", "apply").returncode == 0
    both = forkq(tmp_path, "work", "--queues", "alpha,beta", "--burst")
    assert both.returncode == 2 and "default and other" in both.stderr, both


def test_database_name_picks_one_database(tmp_path: Path) -> None:
    home, other = sqlite_url_for(tmp_path / "home.db"), sqlite_url_for(tmp_path / "other.db")
    write_config(tmp_path, home, {"other": (other, "beta")})
    applied = forkq(tmp_path, "schema", "apply", "--database", "other")
    assert applied.returncode == 0, applied
    assert applied.stdout.splitlines() == [
        f"schema version {SCHEMA_VERSION} applied to other: {other}"
    ]
    assert not (tmp_path / "home.db").exists()
    checked = forkq(tmp_path, "check", "--database", "other")
    assert checked.returncode == 0, checked
    assert "default" not in checked.stdout and "ok    schema    other: version" in checked.stdout
    q = Queue(other, wake=False)
    job = q.enqueue("m.where", {"file": str(tmp_path / "ran.txt")}, queue="beta").id
    q.close()
    worked = forkq(tmp_path, "work", "--database", "other", "--burst")
    assert worked.returncode == 0, worked
    assert (tmp_path / "ran.txt").read_text().splitlines() == [f"{job},beta"]
    ran = forkq(tmp_path, "run", "--database", "other")
    assert ran.returncode == 2 and "every database" in ran.stderr, ran
