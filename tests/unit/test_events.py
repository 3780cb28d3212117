"""Every event name the tests rely on is emitted by the daemon through supervisor.events,
so renaming one renames it for the tests too (a negative assertion cannot pass because
the event it looks for no longer exists)."""

from __future__ import annotations

from pathlib import Path

from supervisor import events

SUPERVISOR = Path(__file__).resolve().parents[2] / "supervisor"


def test_each_event_name_is_emitted_through_the_module() -> None:
    source = "\n".join(
        p.read_text(encoding="utf-8") for p in SUPERVISOR.rglob("*.py") if p.name != "events.py"
    )
    names = [name for name in vars(events) if name.isupper()]
    assert names, "no event names found"
    unused = [name for name in names if f"events.{name}" not in source]
    assert unused == []
    literal = [getattr(events, n) for n in names if f'"{getattr(events, n)}"' in source]
    assert literal == [], f"emitted as string literals, not through events: {literal}"
