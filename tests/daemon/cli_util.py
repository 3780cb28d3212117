"""What the `forkq` command-line tests share (test_cli.py, test_cli_schema.py): a work
directory with a handler module and a config naming it (the `workdir` fixture; import
`workdir_fixture`), `forkq(...)` as a real subprocess, and `ok` / `failed` to judge one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from util import subprocess_env

from supervisor import Queue
from supervisor.store import Store

OWNER = "test-host:1:feedbeef"  # a lease owner that is not a real process
HANDLER_MODULE = """
from supervisor import handler

@handler("mail.send", queue="mail", max_attempts=4)
def send(payload, job):
    pass
"""


@pytest.fixture(name="workdir")
def workdir_fixture(tmp_path: Path) -> Path:
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
