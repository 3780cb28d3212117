"""Security properties users rely on: SQL is never built by string formatting (a static
check of supervisor/'s Python sources, and of itself), and the named query files bind
every value. Secrets: tests/daemon/test_security.py; rows are data, never code:
tests/store/test_security_rows.py.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

import pytest
import structlog
from util import REPO_ROOT

pytestmark = pytest.mark.timeout(120, method="thread")  # the worker's soft timeout owns SIGALRM


@pytest.fixture(autouse=True)
def fresh_logging() -> Iterator[None]:
    """An in-process `cli.main` binds structlog to the stdout pytest captured for that test,
    which is closed afterwards: start and end every test with structlog's defaults."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


# --- SQL is never built by string formatting ----------------------------------------------------

SUPERVISOR = REPO_ROOT / "supervisor"
SQL_WORDS = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|REPLACE|PRAGMA|CREATE|DROP|ALTER|TRUNCATE|GRANT|KILL|"
    r"BEGIN|COMMIT|ROLLBACK|WHERE|VALUES)\b|\bforkq_[a-z_]+\b"
)
EXECUTORS = {"execute", "executemany", "executescript", "mogrify"}
# The documented exceptions: MariaDB's multi-row INSERT ... RETURNING joins rows that the
# driver escaped one by one (cursor.mogrify of the named row template); `_send` puts the
# constant "BEGIN;" before and ";COMMIT" after a named query, one packet for the three
# (its values still bound by the driver); `_execute_fetch` joins two named queries (the
# successes written and the claim's read) with ";" after that constant BEGIN, the same way.
ALLOWED = {
    ("store/mysql.py", "_insert_returning"),
    ("store/mysql.py", "_send"),
    ("store/mysql.py", "execute_fetch"),
}


class SqlBuilding(ast.NodeVisitor):
    """Finds SQL text built with f-strings, % or .format, and execute() calls whose SQL is
    neither a literal nor a named query."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.function = "<module>"
        self.found: list[tuple[str, str, int, str]] = []
        self.query_names: set[str] = set()  # local names bound to a named query

    def report(self, node: ast.AST, what: str) -> None:
        self.found.append((self.path, self.function, getattr(node, "lineno", 0), what))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer, outer_names = self.function, self.query_names
        self.function, self.query_names = node.name, set()
        for inner in ast.walk(node):
            if isinstance(inner, ast.Assign) and is_named_query(inner.value):
                self.query_names |= {t.id for t in inner.targets if isinstance(t, ast.Name)}
            if (
                isinstance(inner, ast.For)
                and isinstance(inner.target, ast.Name)
                and isinstance(inner.iter, ast.Name)  # for statement in statements (DDL)
            ):
                self.query_names.add(inner.target.id)
        self.generic_visit(node)
        self.function, self.query_names = outer, outer_names

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        literal = "".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
        if SQL_WORDS.search(literal):
            self.report(node, f"f-string {literal.strip()[:60]!r}")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        for side in (node.left, node.right):
            if (
                isinstance(node.op, ast.Mod | ast.Add)
                and isinstance(side, ast.Constant)
                and isinstance(side.value, str)
                and SQL_WORDS.search(side.value)
            ):
                self.report(node, f"{type(node.op).__name__} on {side.value.strip()[:60]!r}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "format"
            and isinstance(func.value, ast.Constant)
            and isinstance(func.value.value, str)
            and SQL_WORDS.search(func.value.value)
        ):
            self.report(node, f".format on {func.value.value.strip()[:60]!r}")
        if isinstance(func, ast.Attribute) and func.attr in EXECUTORS and node.args:
            sql = node.args[0]
            fine = (
                (isinstance(sql, ast.Constant) and isinstance(sql.value, str))
                or is_named_query(sql)
                or (isinstance(sql, ast.Name) and sql.id in self.query_names)
            )
            if not fine:
                self.report(node, f".{func.attr}() of {ast.unparse(sql)[:60]}")
        self.generic_visit(node)


def is_named_query(node: ast.AST) -> bool:
    """queries["claim"], self.queries[name], QUERIES[...]."""
    if not isinstance(node, ast.Subscript):
        return False
    base = node.value
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return str(name).lower() == "queries"


def sql_building() -> list[tuple[str, str, int, str]]:
    found = []
    for path in sorted(SUPERVISOR.rglob("*.py")):
        visitor = SqlBuilding(str(path.relative_to(SUPERVISOR)))
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        found += visitor.found
    return found


def test_no_sql_is_built_by_string_formatting_in_the_python_sources() -> None:
    found = [f for f in sql_building() if (f[0], f[1]) not in ALLOWED]
    assert found == [], (
        "SQL built by formatting (use a named query and bound values):\n"
        + "\n".join(
            f"  supervisor/{path}:{line} in {function}: {what}"
            for path, function, line, what in found
        )
    )


def test_the_static_check_finds_what_it_looks_for() -> None:
    """The checker itself: each way of building SQL it must catch, caught."""
    source = """
def f(cursor, table, n, queries):
    cursor.execute(f"SELECT * FROM {table}")
    cursor.execute("DELETE FROM forkq_jobs WHERE id = %d" % n)
    cursor.execute("UPDATE forkq_jobs SET x = {}".format(n))
    cursor.execute("SELECT 1 FROM " + table)
    text = "anything"
    cursor.execute(text)
    cursor.execute(queries["claim"], {})
    cursor.execute("SELECT 1")
"""
    visitor = SqlBuilding("example.py")
    visitor.visit(ast.parse(source))
    lines = sorted({line for _, _, line, _ in visitor.found})
    assert lines == [3, 4, 5, 6, 8], visitor.found


def test_the_named_query_files_bind_every_value() -> None:
    """mysql.sql uses only %(name)s placeholders, sqlite.sql only :name; no {} templates,
    no positional %s a caller could fill by formatting."""
    mysql = (SUPERVISOR / "store" / "sql" / "mysql.sql").read_text(encoding="utf-8")
    sqlite = (SUPERVISOR / "store" / "sql" / "sqlite.sql").read_text(encoding="utf-8")
    bodies = {}
    for name, text in (("mysql.sql", mysql), ("sqlite.sql", sqlite)):
        lines = text.splitlines()
        bodies[name] = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
        assert not re.search(r"[{}]", bodies[name]), f"{name}: a template placeholder"
    mysql_body, sqlite_body = bodies["mysql.sql"], bodies["sqlite.sql"]
    assert re.findall(r"%(?!\(\w+\)s)", mysql_body) == [], "mysql.sql: a % that is not %(name)s"
    assert "%" not in sqlite_body and "?" not in sqlite_body, "sqlite.sql binds only :name"
