"""Which commands may create a database (issue 21.14): only `schema apply`, `run` and
`work`. Every other command refuses a missing SQLite file with one line naming the URL
and where it came from, and leaves no file or directory behind.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cli_util import failed, forkq_env
from util import subprocess_env


def run_forkq(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`forkq ARGS` in `cwd` with no --database, config or URL unless `env` gives one."""
    environ = subprocess_env("unused")
    for key in ("FORKQ_DATABASE_URL", "FORKQ_CONFIG"):
        environ.pop(key, None)
    environ.update(env)
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_status_without_a_config_does_not_create_forkq_db(tmp_path: Path) -> None:
    line = failed(run_forkq(tmp_path, "status"), 1)
    assert str(tmp_path / "forkq.db") in line and "the default" in line
    assert "forkq schema apply" in line
    assert list(tmp_path.iterdir()) == []


def test_a_mistyped_path_in_the_config_names_it_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "forkq.toml").write_text('[database]\nurl = "sqlite:///typo/var/forkq.db"\n')
    for args in (("jobs",), ("enqueue", "mail.send"), ("pause", "mail"), ("locks",)):
        line = failed(run_forkq(tmp_path, *args, "-c", "forkq.toml"), 1)
        assert "sqlite:///typo/var/forkq.db" in line, line
        assert "[database] url of forkq.toml (-c)" in line, line
    environ = {"FORKQ_CONFIG": str(tmp_path / "forkq.toml")}
    line = failed(run_forkq(tmp_path, "status", **environ), 1)
    assert "(FORKQ_CONFIG)" in line
    assert not (tmp_path / "typo").exists()


def test_check_fails_on_a_missing_file_named_by_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nowhere' / 'forkq.db'}"
    result = run_forkq(tmp_path, "check", FORKQ_DATABASE_URL=url)
    assert result.returncode == 78, (result.stdout, result.stderr)  # as `forkq run` exits
    [line] = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert "database" in line and "FORKQ_DATABASE_URL" in line and url in line
    assert not (tmp_path / "nowhere").exists()


def test_only_schema_apply_creates_the_database(tmp_path: Path) -> None:
    """`run` and `work` refuse a missing file too (exit 78, before anything forks): an
    empty file left by a typo would then read as "tables missing" to every command."""
    url = f"sqlite:///{tmp_path / 'new' / 'forkq.db'}"
    for command in (["work", "--burst"], ["run"]):
        refused = subprocess.run(
            [sys.executable, "-m", "supervisor", *command, "--database", url],
            cwd=tmp_path,
            env=forkq_env(tmp_path, url),
            capture_output=True,
            text=True,
            timeout=60,
        )
        line = refused.stderr.strip().splitlines()[-1]
        assert refused.returncode == 78, (refused.returncode, refused.stderr)
        assert line.startswith("forkq: error: ") and "schema apply" in line and url in line
        assert not (tmp_path / "new").exists()
    applied = run_forkq(tmp_path, "schema", "apply", "--database", f"{url}2")
    assert applied.returncode == 0, applied.stderr
    assert (tmp_path / "new" / "forkq.db2").exists()
