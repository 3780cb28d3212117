"""The wheel `make dist` builds for app servers (issue 21.6 and 21.7): the `supervisor`
package with its SQL files, templates and static files, and nothing else at the top
level (the demo's `handlers` package stays in the repository: applications have their
own); the licence as an SPDX expression."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from util import REPO_ROOT


def checkout_copy(target: Path) -> Path:
    """The repository's files (tracked, and new ones not ignored), without build/ or .venv."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


def test_make_dist_builds_a_wheel_of_the_supervisor_package_only(tmp_path: Path) -> None:
    tree = checkout_copy(tmp_path / "forkq")
    built = subprocess.run(
        ["make", "-s", "dist", f"PY={sys.executable}"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = (tree / "dist").glob("forkq-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        fields = archive.read(metadata).decode()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"supervisor", metadata.split("/", 1)[0]}, sorted(tops)
    assert not any(name.startswith("handlers/") for name in names)
    for folder, pattern in [
        ("supervisor/store/sql", "*.sql"),
        ("supervisor/web/templates", "*.html"),
        ("supervisor/web/static", "*"),
    ]:
        expected = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / folder).glob(pattern)}
        assert expected and expected <= names, sorted(expected - names)
    assert "supervisor/__main__.py" in names
    assert "License-Expression: MIT" in fields.splitlines(), fields[:800]


def test_the_test_tools_are_pinned_exactly_and_the_runtime_takes_ranges() -> None:
    """A new release of ruff, mypy or pytest must not fail CI on a fresh machine (issue
    21.10); an application installing forkq must not be held to exact versions."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    loose = [r for r in extras["test"] if not re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][\w.]*", r)]
    assert not loose, f"not pinned exactly: {loose}"
    for requirement in [*project["dependencies"], *extras["web"], *extras["metrics"]]:
        assert "==" not in requirement, requirement


def test_make_run_installs_the_runtime_and_the_demos_extras_only(tmp_path: Path) -> None:
    """`make run` needs no test toolchain (issue 21.7): what it would do, in a fresh venv."""
    planned = subprocess.run(
        ["make", "-n", "run", f"VENV={tmp_path / 'venv'}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if "pip install" in line]
    assert any("-e '.[web,metrics]'" in line for line in installs), installs
    assert not any("test]" in line or "test," in line for line in installs), installs


def test_a_missing_extra_names_a_command_that_installs_it(tmp_path: Path) -> None:
    """forkq is on no package index, so `pip install 'forkq[web]'` fails (issue 21.5): the
    errors of a missing extra name a command that works as written, run here as printed."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    bare = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", str(REPO_ROOT)]
    subprocess.run(bare, check=True, capture_output=True, timeout=300)  # no extras
    config = tmp_path / "forkq.toml"
    url = f"sqlite:///{tmp_path / 'forkq.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORKQ_", "PYTHONPATH"))}
    forkq = str(venv / "bin" / "forkq")
    # The database exists: what is missing is the extra, not the file.
    config.write_text(f'[database]\nurl = "{url}"\n')
    subprocess.run([forkq, "schema", "apply", "-c", str(config)], check=True, env=env, timeout=60)
    config.write_text(f'[database]\nurl = "{url}"\n\n[metrics]\nlisten = "127.0.0.1:9740"\n')
    for argv, module in [
        ([forkq, "check", "-c", str(config)], "prometheus_client"),
        ([forkq, "web", "-c", str(config)], "jinja2"),
    ]:
        failed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        assert failed.returncode == 78, failed.stdout + failed.stderr
        found = re.search(r"(\S+ -m pip install -e \S+)", failed.stdout + failed.stderr)
        assert found, failed.stdout + failed.stderr
        command = shlex.split(found[1])
        assert command[0] == str(venv / "bin" / "python"), command
        subprocess.run(command, check=True, capture_output=True, env=env, timeout=300)
        subprocess.run([command[0], "-c", f"import {module}"], check=True, timeout=60)
