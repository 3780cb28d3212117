"""Meanings as types (supervisor/kinds.py): a child's retire reason and its metric label,
roles, on-success modes and the cluster's reasons for settling a gone worker's jobs are
enums, and no module but kinds.py spells one as a string literal."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from supervisor.config import build_config
from supervisor.errors import ConfigError
from supervisor.kinds import ChildExit, GoneWorker, OnSuccess, RetireReason, Role
from supervisor.observe import metrics

SUPERVISOR = Path(__file__).resolve().parents[2] / "supervisor"


@pytest.mark.parametrize(
    ("said", "reason", "label"),
    [
        (RetireReason.MAX_JOBS.said(1000), RetireReason.MAX_JOBS, ChildExit.MAX_JOBS),
        (RetireReason.MAX_LIFETIME.said(), RetireReason.MAX_LIFETIME, ChildExit.MAX_LIFETIME),
        (RetireReason.MEMORY.said(512), RetireReason.MEMORY, ChildExit.MEMORY),
        (RetireReason.POOL_SHRINKS.said(), RetireReason.POOL_SHRINKS, ChildExit.RETIRED),
        (RetireReason.MASTER_GONE.said(), RetireReason.MASTER_GONE, ChildExit.EXITED),
        ("max_jobs_per_childish", None, ChildExit.EXITED),
        ("", None, ChildExit.EXITED),
    ],
)
def test_what_a_child_says_is_read_back_as_its_reason_and_label(
    said: str, reason: RetireReason | None, label: ChildExit
) -> None:
    assert RetireReason.of(said) is reason
    assert metrics.exit_reason(True, said, False, False) is label


def test_the_texts_stay_as_logs_and_dashboards_know_them() -> None:
    assert RetireReason.MAX_JOBS.said(500) == "max_jobs_per_child (500)"
    assert GoneWorker.LEASE_EXPIRED.said("holder h:1:a") == "lease expired (holder h:1:a)"
    assert tuple(ChildExit) == metrics.EXIT_REASONS
    assert [str(r) for r in Role] == ["worker", "master"]


def test_every_label_is_reachable() -> None:
    facts = [(True, r.said(), False, False) for r in RetireReason]
    facts += [(False, "", True, False), (False, "", False, True), (False, "", False, False)]
    seen = {metrics.exit_reason(*f) for f in facts} | {
        metrics.exit_reason(True, "", False, False, True)
    }
    assert seen == set(ChildExit)


def test_the_config_maps_on_success_to_the_enum(sqlite_db_url: str) -> None:
    raw = {"database": {"url": sqlite_db_url}, "pools": {"a": {"on_success": "archive"}}}
    [pool] = build_config(raw, "<test>").pools
    assert pool.on_success is OnSuccess.ARCHIVE
    with pytest.raises(ConfigError, match="expected one of delete, archive, keep"):
        build_config({**raw, "pools": {"a": {"on_success": "shred"}}}, "<test>")


def spelled(tree: ast.AST, meanings: set[str]) -> list[tuple[int, str]]:
    """String literals that spell a meaning, but dict keys, subscripts (row["master"]),
    docstrings and other enums' member definitions (outcomes.SettleKind.SHUTDOWN)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            skip |= {id(k) for k in node.keys if k is not None}
        elif isinstance(node, ast.Subscript):
            skip.add(id(node.slice))
        elif isinstance(node, ast.ClassDef):
            skip |= {id(s.value) for s in node.body if isinstance(s, ast.Assign | ast.Expr)}
        elif isinstance(node, ast.Module | ast.FunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr):
                skip.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in meanings and id(node) not in skip
    ]


def test_no_module_but_kinds_spells_a_meaning() -> None:
    # ChildExit's labels share their text with job statuses ("cancelled"): they are
    # derived (RetireReason.exit, metrics.exit_reason), so they are left out here.
    meanings = {str(m) for kind in (Role, OnSuccess, RetireReason, GoneWorker) for m in kind}
    found = [
        f"{path.relative_to(SUPERVISOR.parent)}:{line}: {text!r}"
        for path in sorted(SUPERVISOR.rglob("*.py"))
        if path.name != "kinds.py"
        for line, text in spelled(ast.parse(path.read_text(encoding="utf-8")), meanings)
    ]
    assert found == []
    assert spelled(ast.parse('register(name, "worker")\nrow["worker"]\n'), meanings) == [
        (1, "worker")
    ]
