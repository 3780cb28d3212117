"""The packaging of forkq (issue 21.6, 21.7, 21.10)."""

from __future__ import annotations

import re
import tomllib

from util import REPO_ROOT


def test_the_test_tools_are_pinned_exactly_and_the_runtime_takes_ranges() -> None:
    """A new release of ruff, mypy or pytest must not fail CI on a fresh machine (issue
    21.10); an application installing forkq must not be held to exact versions."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    loose = [r for r in extras["test"] if not re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][\w.]*", r)]
    assert not loose, f"not pinned exactly: {loose}"
    for requirement in [*project["dependencies"], *extras["web"], *extras["metrics"]]:
        assert "==" not in requirement, requirement
