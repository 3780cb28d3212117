"""What `forkq show` prints below a job's fields: its kept result and its attempts."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from supervisor.cli.tables import first_line, table
from supervisor.escaping import for_terminal
from supervisor.models import JobRow
from supervisor.results import (
    AttemptView,
    JobResult,
    attempt_history,
    read_result,
    recorded_attempts,
)
from supervisor.store import Store


def job_extras(
    store: Store, row: JobRow | None, job_id: int
) -> tuple[JobResult, list[AttemptView]]:
    """The job's result and its attempts (once its row is gone, those still recorded)."""
    attempts = recorded_attempts(store, job_id) if row is None else attempt_history(store, row)
    return read_result(store, job_id), attempts


def extras_json(result: JobResult, attempts: list[AttemptView]) -> dict[str, Any]:
    return {
        "result": {"state": result.state, "kept": result.kept, "value": result.value},
        "attempt_history": [asdict(a) for a in attempts],  # "attempts" is the job's count
    }


def print_extras(result: JobResult, attempts: list[AttemptView], width: int) -> None:
    kept = json.dumps(result.value, ensure_ascii=False) if result.kept else "- (not kept)"
    print(f"{'result'.ljust(width)}{for_terminal(kept)}")
    if not attempts:
        return
    print("attempt history:")
    rows = [
        (a.attempt, a.outcome, _time(a.started_at), _time(a.ended_at), a.host, a.pid,
         first_line(a.error, 100))
        for a in attempts
    ]  # fmt: skip
    for line in table(
        ("#", "OUTCOME", "STARTED", "ENDED", "HOST", "PID", "ERROR"), rows
    ).splitlines():
        print(f"  {line}")


def _time(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)
