"""deploy/grafana-forkq.json charts only series a daemon exports, and every one SPEC names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from supervisor.observe.metrics import SERIES

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana-forkq.json"
SPEC_SERIES = SERIES[:9]


def expressions(panels: list[dict[str, Any]]) -> list[str]:
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def test_the_dashboard_charts_exported_series_and_all_that_spec_names() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    used = set()
    for expr in expressions(panels):
        for name in re.findall(r"forkq_[a-z_]+", expr):
            used.add(re.sub(r"_(bucket|sum|count)$", "", name))
    assert used <= set(SERIES), used - set(SERIES)
    assert set(SPEC_SERIES) <= used, set(SPEC_SERIES) - used
    titles = " ".join(p["title"].lower() for p in panels)
    for word in ("ready", "scheduled", "running", "dead", "oldest", "p50", "p95", "exits"):
        assert word in titles, word
