"""Imports point down the map (ARCHITECTURE.md), checked over the source with ast.

Layers, lowest first; a module may import its own layer and the ones below, never one
above. Lazy imports inside functions count too: they are imports all the same, and so do
imports under `if TYPE_CHECKING:` (a part that names the Master's type depends on it).
Only the import-cycle check leaves those out: that is what they are for.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

SUPERVISOR = Path(__file__).resolve().parents[2] / "supervisor"

LAYERS = [
    {"errors", "events", "kinds", "models", "durations", "escaping", "dburl", "policy", "outcomes",
     "config", "logs", "proc", "unique", "timing", "jobref", "masking", "columns"},
    {"store"},
    {"registry", "fate", "lock", "wake", "building", "queue", "batches", "status", "workflow",
     "results", "routing"},
    {"cluster"},
    {"observe"},
    {"work"},
    {"daemon"},
    {"cli", "web", "contrib", "__main__", "__init__"},
]  # fmt: skip
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def box(module: str) -> str:
    """supervisor.cluster.tick -> cluster; supervisor.models -> models."""
    return module.split(".")[1] if module.count(".") else "__init__"


def runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node but those under `if TYPE_CHECKING:` (imports for the type checker only)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def imports(path: Path, *, typing: bool = True) -> set[str]:
    """What the module imports; with typing=False not what only the type checker reads."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree) if typing else runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "supervisor" or node.module.startswith("supervisor."):
                # `from supervisor.web import filters` imports the module filters itself
                found |= {
                    f"{node.module}.{a.name}"
                    if (SUPERVISOR.parent / f"{node.module}.{a.name}".replace(".", "/"))
                    .with_suffix(".py")
                    .exists()
                    or (SUPERVISOR.parent / f"{node.module}.{a.name}".replace(".", "/")).is_dir()
                    else node.module
                    for a in node.names
                }
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("supervisor.")}
    return found


def module_name(path: Path) -> str:
    parts = path.relative_to(SUPERVISOR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def graph(typing: bool = True) -> dict[str, set[str]]:
    return {module_name(p): imports(p, typing=typing) for p in SUPERVISOR.rglob("*.py")}


def test_every_box_has_a_layer() -> None:
    boxes = {box(m) for m in graph()}
    assert boxes <= set(RANK), f"not on the map: {sorted(boxes - set(RANK))}"


def test_imports_point_down_the_map() -> None:
    upward = [
        f"{module} imports {target}"
        for module, targets in graph().items()
        for target in targets
        if RANK[box(target)] > RANK[box(module)]
    ]
    assert upward == []


def test_nothing_imports_the_command_line_or_the_dashboard() -> None:
    offenders = [
        f"{module} imports {target}"
        for module, targets in graph().items()
        for target in targets
        if box(target) in {"cli", "web"} and box(module) not in {"cli", "web", "__main__"}
    ]
    assert offenders == []


def test_only_the_command_line_imports_the_master() -> None:
    """The daemon's parts take what they need (daemon/shared.py), never the Master."""
    importers = sorted(m for m, ts in graph().items() if "supervisor.daemon.master" in ts)
    assert importers == ["supervisor.cli.commands"]


def test_there_is_no_import_cycle() -> None:
    runtime = graph(typing=False)
    edges = {m: {t for t in ts if t in runtime} for m, ts in runtime.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, trail: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle.extend([*trail[trail.index(nxt) :], nxt] if nxt in trail else [node, nxt])
                return True
            if nxt not in state and visit(nxt, [*trail, nxt]):
                return True
        state[node] = 2
        return False

    for start in sorted(edges):
        if start not in state and visit(start, [start]):
            break
    assert cycle == [], " -> ".join(cycle)


def test_the_check_catches_an_upward_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from supervisor.daemon.master import Master\n")
    assert imports(sample) == {"supervisor.daemon.master"}
    assert RANK[box("supervisor.daemon.master")] > RANK[box("supervisor.store.base")]


def test_the_check_counts_an_import_for_the_type_checker(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from supervisor.daemon.master import Master\n"
    )
    assert imports(sample) == {"supervisor.daemon.master"}
    assert imports(sample, typing=False) == set()


def test_no_module_imports_another_s_private_name() -> None:
    """A name two modules share is public in its home (cli/common.py, config/values.py)."""
    found = set()
    for path in SUPERVISOR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("supervisor"):
                found |= {
                    f"{module_name(path)} imports {a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                }
    assert sorted(found) == []


def test_the_cli_and_the_daemon_on_sqlite_never_load_the_mysql_driver() -> None:
    """`forkq run` and every command on the embedded default import what SQLite needs:
    PyMySQL (and its ssl) loads only where a MySQL store is opened. A launch pays each
    import once, and so does every `forkq` command a cron job or a script runs."""
    probe = (
        "import sys, supervisor.cli.parser, supervisor.daemon.master, supervisor.store.sqlite;"
        "print(sorted(m for m in sys.modules if m.startswith(('pymysql', 'supervisor.store.mysql'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]", out.stdout
