"""supervisor/events.py names every event the code logs, and the code logs only those.

Read from the source with ast: every call of a logger method (`.debug`, `.info`,
`.warning`, `.error`, `.exception`, `.critical`) must pass its event as a constant of
supervisor.events (or a name holding one), never a string literal; and every constant
is used by the code. Renaming an event renames it for the tests that import it too (a
negative assertion cannot pass because the event it looks for no longer exists).
"""

from __future__ import annotations

import ast
from pathlib import Path

from supervisor import events

SUPERVISOR = Path(__file__).resolve().parents[2] / "supervisor"
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}


def constants() -> dict[str, str]:
    return {name: value for name, value in vars(events).items() if name.isupper()}


def literal_events(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of each logger call whose event is a string literal."""
    return [
        (node.lineno, node.args[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LEVELS
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


def used_constants(tree: ast.AST) -> set[str]:
    """Every `events.NAME` the module reads."""
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "events"
        and node.attr.isupper()
    }


def sources() -> dict[Path, ast.AST]:
    home = SUPERVISOR / "events.py"
    return {
        p: ast.parse(p.read_text(encoding="utf-8")) for p in SUPERVISOR.rglob("*.py") if p != home
    }


def test_the_module_names_every_event_once() -> None:
    values = list(constants().values())
    assert len(values) >= 70
    assert len(values) == len(set(values)), "two constants name one event"
    assert all(name == value.upper() for name, value in constants().items())


def test_every_logged_event_is_one_of_the_constants() -> None:
    known = {value: name for name, value in constants().items()}
    literal = [
        f"{path.relative_to(SUPERVISOR.parent)}:{line}: {text!r}"
        + (f" (use events.{known[text]})" if text in known else " (add it to events.py)")
        for path, tree in sources().items()
        for line, text in literal_events(tree)
    ]
    assert literal == []


def test_every_constant_is_emitted() -> None:
    used = set().union(*(used_constants(tree) for tree in sources().values()))
    assert sorted(set(constants()) - used) == []
    assert sorted(used - set(constants())) == []


def test_the_check_finds_a_literal_event() -> None:
    tree = ast.parse('log.info("job_finished", job_id=1)\nlog.info(events.JOB_FINISHED)\n')
    assert literal_events(tree) == [(1, "job_finished")]
    assert used_constants(tree) == {"JOB_FINISHED"}
