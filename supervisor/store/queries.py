"""The named-query files (store/sql/) and how they are read.

One file of named queries per backend (`-- name: x` blocks, parsed once), and one DDL
script per backend; the upgrades from each older schema version are named queries too
(`upgrade_to_N`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

SQL_DIR = Path(__file__).parent / "sql"  # mysql.sql, sqlite.sql and their *_schema.sql


def schema_text(backend: str) -> str:
    """The DDL script of `backend` ("mysql" or "sqlite"), as `forkq schema print` shows it."""
    return (SQL_DIR / f"{backend}_schema.sql").read_text(encoding="utf-8")


def backend_queries(backend: str) -> dict[str, str]:
    """The named queries of `backend` ("mysql" or "sqlite"), parsed."""
    return load_queries(SQL_DIR / f"{backend}.sql")


def load_queries(path: Path) -> dict[str, str]:
    """Parse `-- name: x` blocks into {name: sql}; comment lines before a name are dropped."""
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("-- name:"):
            if name:
                queries[name] = _finish(lines)
            name, lines = line.split(":", 1)[1].strip(), []
        elif name is not None:
            lines.append(line)
    if name:
        queries[name] = _finish(lines)
    return queries


def _finish(lines: list[str]) -> str:
    """The statement without its full-line comments (they document the file, not the query)."""
    code = [line for line in lines if not line.lstrip().startswith("--")]
    return "\n".join(code).strip().rstrip(";").strip()


def split_script(text: str) -> list[str]:
    """Split a DDL script on `;` at line ends; comments are dropped (none contain `;`)."""
    body = "\n".join(line for line in text.splitlines() if not line.strip().startswith("--"))
    return [part.strip() for part in body.split(";\n") if part.strip().rstrip(";").strip()]


UPGRADE_PREFIX = "upgrade_to_"


def upgrades(queries: Mapping[str, str]) -> dict[int, list[str]]:
    """{N: the statements that take version N-1 to N}, from the `upgrade_to_N` queries.

    An upgrade may hold several statements, one per line ending in `;`; each records
    its own version last, so a script stopped half-way says how far it got.
    """
    return {
        int(name[len(UPGRADE_PREFIX) :]): [part.rstrip(";").strip() for part in split_script(sql)]
        for name, sql in queries.items()
        if name.startswith(UPGRADE_PREFIX)
    }


def upgrade_statements(queries: Mapping[str, str], from_version: int) -> list[str]:
    """Every statement, in order, that takes a database at `from_version` to the latest."""
    return [
        statement
        for version, statements in sorted(upgrades(queries).items())
        if version > from_version
        for statement in statements
    ]
