"""`forkq run` at boot, before any fork: a database that is not ready for it.

A database without forkq's tables or with an older schema is an operator's step (one
line naming `forkq schema apply`, exit 78, so systemd does not restart-loop); a database
that is briefly locked or not answering yet is waited for, never a crash.
"""

from __future__ import annotations

from pathlib import Path

from cli_util import (
    failed,
    forkq,
    ok,
    workdir_fixture,  # noqa: F401  (the `workdir` fixture)
)
from util import sql

from supervisor.store import SCHEMA_VERSION


def test_run_on_a_database_without_tables_names_schema_apply_and_exits_78(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'empty.db'}"
    result = forkq(workdir, "run", "-c", "forkq.toml", database=url)
    assert "forkq schema apply" in failed(result, 78)
    assert "master_crashed" not in result.stdout  # an operator's step, not a defect


def test_run_on_an_older_schema_names_schema_apply_and_exits_78(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'old.db'}"
    ok(forkq(workdir, "schema", "apply", database=url))
    # What a database left at the previous release looks like to this one.
    sql(url, "UPDATE forkq_schema SET version = ?", (SCHEMA_VERSION - 1,))
    result = forkq(workdir, "run", "-c", "forkq.toml", database=url)
    line = failed(result, 78)
    assert "forkq schema apply" in line and f"version {SCHEMA_VERSION - 1}" in line
    assert "master_crashed" not in result.stdout
