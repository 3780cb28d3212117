"""Jinja filters: times, ages and counts as the pages show them. They return plain text;
autoescaping escapes it like any other value."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import jinja2

from supervisor import registry
from supervisor.durations import format_duration
from supervisor.models import JobRow, QueueStats

PAYLOAD_SHOWN = 256 * 1024  # characters of a payload a job's page shows


def when(value: datetime | float | str | None) -> str:
    """A UTC time to the second, or a dash (from epoch seconds, or ISO 8601 as the status
    document gives it)."""
    if value is None:
        return "-"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    moment = value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(value: datetime | float | None, now: float) -> str:
    """How long before `now` (the database clock), e.g. "3m 20s ago"; "in 5s" ahead."""
    if value is None:
        return "-"
    seconds = now - (value.timestamp() if isinstance(value, datetime) else float(value))
    if seconds < 0:
        return f"in {format_duration(-seconds)}"
    return f"{format_duration(seconds)} ago"


def duration(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(max(0.0, seconds))


def shown(stats: QueueStats, count: str) -> str:
    """A count of `forkq status`: "100000+" when it reached the cap."""
    return stats.shown(count)


def pretty_payload(text: str) -> str:
    """JSON indented for reading; text that is not JSON as it is; cut past PAYLOAD_SHOWN."""
    try:
        shown_text = json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except (ValueError, RecursionError):
        shown_text = text
    if len(shown_text) > PAYLOAD_SHOWN:
        return (
            shown_text[:PAYLOAD_SHOWN] + f"\n… ({len(shown_text) - PAYLOAD_SHOWN} more characters)"
        )
    return shown_text


def json_text(value: Any) -> str:
    """A kept value as JSON on one line, its text as written (Jinja's `tojson` turns every
    non-ASCII character and <, >, & into \\u escapes); cut past PAYLOAD_SHOWN."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if len(text) > PAYLOAD_SHOWN:
        return text[:PAYLOAD_SHOWN] + f" … ({len(text) - PAYLOAD_SHOWN} more characters)"
    return text


def first_line(text: str | None, width: int = 120) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def tag_list(text: str | None) -> list[str]:
    """The tags of a job's `tags` column (a JSON list); nothing if it holds anything else."""
    try:
        tags = json.loads(text) if text else []
    except ValueError:
        return []
    return [str(t) for t in tags] if isinstance(tags, list) else []


def search_term(value: str, name: str) -> str:
    """`NAME:VALUE` as the jobs page's search reads it back (search.py splits with shlex):
    a tag holding a quote or a backslash stays one term."""
    return f"{name}:{shlex.quote(value)}"


def progress_text(text: str | None) -> str:
    """A job's reported progress as "40% rows 4000/10000"; "" if none or unreadable."""
    try:
        report = json.loads(text) if text else None
        if not isinstance(report, dict):
            return ""
        percent = float(report["percent"])
    except (ValueError, TypeError, KeyError):
        return ""
    return f"{percent:g}% {report.get('message') or ''!s}".strip()


def most_attempts(job: JobRow | Mapping[str, Any]) -> str:
    """The attempts the daemon gives the job (fate.max_attempts_for): the row's, else its
    handler's when the dashboard imported its module (the config's), else "default"."""
    given, handler = (
        (job["max_attempts"], job["handler"])
        if isinstance(job, Mapping)
        else (job.max_attempts, job.handler)
    )
    if given:
        return str(given)
    registered = registry.get(handler)
    return f"{registered.max_attempts} (default)" if registered else "default"


def install(env: jinja2.Environment) -> None:
    env.filters.update(
        when=when,
        ago=ago,
        duration=duration,
        shown=shown,
        pretty_payload=pretty_payload,
        json_text=json_text,
        first_line=first_line,
        tag_list=tag_list,
        search_term=search_term,
        progress_text=progress_text,
        most_attempts=most_attempts,
    )
