"""`[commands."NAME"]` tables (issue 16 item 1): parsed into frozen CommandConfig, every
problem one line naming the file and the key, exit 78 from the real `forkq run`.

argv[0] is looked up at load as the program will be (the table's PATH, else the
daemon's), so a typo stops the boot instead of failing every job. A name that a
Python handler module also registers is refused: which one a job runs must not depend
on the order of registration.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from supervisor.config import CommandConfig, load_config, require_runnable
from supervisor.errors import ConfigError, ExitCode
from supervisor.policy import (
    DEFAULT_BACKOFF_BASE,
    DEFAULT_BACKOFF_CAP,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_SNOOZES,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORKQ_DATABASE_URL", raising=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "forkq.toml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.exit_code == ExitCode.CONFIG
    return str(caught.value).splitlines()


def runnable_problems(path: Path) -> list[str]:
    """What `forkq run`, `work` and `check` refuse on this host (require_runnable); the
    file itself loads, for producers and the CLI."""
    config = load_config(path)
    with pytest.raises(ConfigError) as caught:
        require_runnable(config)
    assert caught.value.exit_code == ExitCode.CONFIG
    return str(caught.value).splitlines()


def executable(directory: Path, name: str, mode: int = 0o755) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    path.chmod(mode)
    return path


def test_a_full_table_is_parsed_into_a_frozen_command_config(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [commands."report.pdf"]
        argv = ["sh", "-c", "exit 0", "--"]
        queue = "reports"
        timeout = "5m"
        max_attempts = 5
        backoff_base = 30
        backoff_cap = "1h"
        max_snoozes = 3
        env = { APP_ENV = "production", PATH = "/usr/bin:/bin" }

        [commands.minimal]
        argv = ["true"]
        """,
    )
    config = load_config(path)
    full, minimal = config.commands
    assert full == CommandConfig(
        name="report.pdf",
        argv=("sh", "-c", "exit 0", "--"),
        queue="reports",
        timeout=300.0,
        max_attempts=5,
        backoff_base=30.0,
        backoff_cap=3600.0,
        max_snoozes=3,
        env={"APP_ENV": "production", "PATH": "/usr/bin:/bin"},
    )
    assert minimal == CommandConfig(name="minimal", argv=("true",))
    assert (minimal.queue, minimal.timeout, minimal.max_attempts) == (
        "default",
        None,
        DEFAULT_MAX_ATTEMPTS,
    )
    assert (minimal.backoff_base, minimal.backoff_cap, minimal.max_snoozes) == (
        DEFAULT_BACKOFF_BASE,
        DEFAULT_BACKOFF_CAP,
        DEFAULT_MAX_SNOOZES,
    )
    with pytest.raises(AttributeError):
        full.queue = "other"  # type: ignore[misc]


def test_every_bad_key_is_reported_at_once_naming_the_file_and_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [commands."a.b"]
        argv = ["true"]
        argvs = ["typo"]
        timeout = 0.05
        max_attempts = 0

        [commands.noargv]
        queue = "q"

        [commands.emptyargv]
        argv = []

        [commands.numbers]
        argv = ["true", 3]

        [commands.badenv]
        argv = ["true"]
        env = { GOOD = "yes", COUNT = 3, FORKQ_DATABASE_URL = "mysql://x" }

        [commands.longqueue]
        argv = ["true"]
        queue = "{long}"
        """.replace("{long}", "q" * 65),
    )
    lines = problems(path)
    source = str(path)
    expected = [
        'commands."a.b".argvs: unknown key',
        'commands."a.b".timeout: must be at least 0.1 seconds',
        'commands."a.b".max_attempts: must be at least 1',
        'commands."noargv".argv: required',
        'commands."emptyargv".argv: expected a non-empty list of strings',
        'commands."numbers".argv: expected a non-empty list of strings',
        'commands."badenv".env: COUNT: expected a string',
        'commands."longqueue".queue: expected a name of 1 to 64 characters',
    ]
    assert len(lines) == len(expected)
    for line, start in zip(lines, expected, strict=True):
        assert line.startswith(f"{source}: {start}"), line


def test_forkq_variables_cannot_be_set_by_a_table(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [commands.env]
        argv = ["true"]
        env = { FORKQ_JOB_ID = "7" }
        """,
    )
    [line] = problems(path)
    assert line.startswith(f'{path}: commands."env".env: FORKQ_JOB_ID: FORKQ_* names are forkq')


def test_pass_env_names_the_daemons_variables_but_never_forkqs_own(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [commands.app]
        argv = ["true"]
        pass_env = ["APP_KEY", "DB_PASSWORD"]
        """,
    )
    assert load_config(path).commands[0].pass_env == ("APP_KEY", "DB_PASSWORD")
    path = write(
        tmp_path,
        """
        [commands.leaky]
        argv = ["true"]
        pass_env = ["APP_KEY", "FORKQ_DATABASE_URL"]

        [commands.odd]
        argv = ["true"]
        pass_env = ["A=B"]
        """,
    )
    assert problems(path) == [
        f'{path}: commands."leaky".pass_env: FORKQ_DATABASE_URL: FORKQ_* variables'
        " (the daemon's secrets) are never passed",
        f"{path}: commands.\"odd\".pass_env: 'A=B' is not a variable name",
    ]


def test_a_program_that_cannot_be_found_or_run_stops_the_daemon(tmp_path: Path) -> None:
    not_executable = executable(tmp_path, "plain.sh", mode=0o644)
    path = write(
        tmp_path,
        f"""
        [commands.typo]
        argv = ["phpp", "/srv/app/job.php"]
        env = {{ PATH = "{tmp_path}" }}

        [commands.missing]
        argv = ["{tmp_path}/nowhere.php"]

        [commands.plain]
        argv = ["{not_executable}"]

        [commands.directory]
        argv = ["{tmp_path}"]
        """,
    )
    lines = runnable_problems(path)
    assert lines == [
        f"{path}: commands.\"typo\".argv: 'phpp' is not an executable found in PATH ({tmp_path})",
        f"{path}: commands.\"missing\".argv: '{tmp_path}/nowhere.php' is not an executable file",
        f"{path}: commands.\"plain\".argv: '{not_executable}' is not an executable file",
        f"{path}: commands.\"directory\".argv: '{tmp_path}' is not an executable file",
    ]


def test_a_bare_name_is_looked_up_in_the_tables_path_first(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    executable(bin_dir, "only-here")
    path = write(
        tmp_path,
        f"""
        [commands.found]
        argv = ["only-here"]
        env = {{ PATH = "{bin_dir}" }}
        """,
    )
    assert load_config(path).commands[0].argv == ("only-here",)
    path = write(tmp_path, '[commands.lost]\nargv = ["only-here"]\n')
    [line] = runnable_problems(path)
    assert "'only-here' is not an executable found in PATH" in line


def run_forkq(
    tmp_path: Path, text: str, *argv: str, command: str = "run"
) -> subprocess.CompletedProcess[str]:
    """The real `forkq run -c FILE` (on a SQLite file it never reaches), or `command`."""
    config = write(tmp_path, text)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("FORKQ_") and key not in ("NOTIFY_SOCKET",)
    }
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    return subprocess.run(
        [sys.executable, "-m", "supervisor", command, *argv, "-c", str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_forkq_run_exits_78_on_a_bad_command_table(tmp_path: Path) -> None:
    done = run_forkq(
        tmp_path,
        f"""
        [database]
        url = "sqlite:///{tmp_path}/never.db"

        [supervisor]
        handlers = []

        [commands."report.pdf"]
        argv = ["no-such-program-anywhere"]
        timeout = 30
        """,
    )
    assert done.returncode == ExitCode.CONFIG, done.stderr
    assert f'{tmp_path}/forkq.toml: commands."report.pdf".argv:' in done.stderr
    assert "'no-such-program-anywhere' is not an executable found in PATH" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "never.db").exists()


def test_a_missing_program_stops_what_runs_jobs_but_not_the_cli(tmp_path: Path) -> None:
    """A deploy half done, php being reinstalled: the operator still lists, enqueues and
    cancels with the daemon's config; `forkq run`, `work` and `check` refuse it (78)."""
    text = f"""
        [database]
        url = "sqlite:///{tmp_path}/q.db"

        [supervisor]
        handlers = []

        [commands."report.pdf"]
        argv = ["{tmp_path}/gone.sh"]
        """
    assert run_forkq(tmp_path, text, "apply", command="schema").returncode == 0
    for command, argv in (("enqueue", ["report.pdf", "{}"]), ("jobs", []), ("status", [])):
        done = run_forkq(tmp_path, text, *argv, command=command)
        assert done.returncode == 0, (command, done.stderr)
        assert "not an executable" not in done.stderr, (command, done.stderr)
    for command in ("run", "work", "check"):
        done = run_forkq(tmp_path, text, command=command)
        assert done.returncode == ExitCode.CONFIG, (command, done.stdout, done.stderr)
        said = done.stdout + done.stderr
        assert f"'{tmp_path}/gone.sh' is not an executable file" in said, (command, said)
        assert "Traceback" not in said, (command, said)


def test_forkq_run_exits_78_when_a_command_and_a_python_handler_share_a_name(
    tmp_path: Path,
) -> None:
    (tmp_path / "clashing.py").write_text(
        "from supervisor import handler\n\n\n"
        '@handler("report.pdf")\n'
        "def report(payload, job):\n"
        "    return None\n",
        encoding="utf-8",
    )
    done = run_forkq(
        tmp_path,
        f"""
        [database]
        url = "sqlite:///{tmp_path}/never.db"

        [supervisor]
        handlers = ["clashing"]

        [commands."report.pdf"]
        argv = ["true"]
        """,
    )
    assert done.returncode == ExitCode.CONFIG, done.stderr
    assert (
        f"{tmp_path}/forkq.toml: commands.\"report.pdf\": 'report.pdf' is also a Python handler"
        in done.stderr
    )
    assert "Traceback" not in done.stderr
