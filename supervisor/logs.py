"""structlog setup: one JSON object a line when stdout is not a TTY (journald), key=value on a terminal.

Every line is an event with a snake_case name and bound context (role, pool, pid,
job_id). Secrets never reach a log line: URLs are logged redacted, and any key that
looks like a secret is masked by a processor as a second line of defence.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

SECRET_KEY = re.compile("password|passwd|secret|token", re.IGNORECASE)


def _mask_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    # Runs for every log line (one per job): a cached verdict per key name.
    for key in event:
        secret = _SECRET_VERDICTS.get(key)
        if secret is None:
            secret = _SECRET_VERDICTS[key] = bool(SECRET_KEY.search(key))
        if secret:
            event[key] = "***"
    return event


_SECRET_VERDICTS: dict[str, bool] = {}


def setup(level: str = "info", json_lines: bool | None = None) -> None:
    """Configure structlog once per process (a forked child keeps the parent's setup)."""
    if json_lines is None:
        json_lines = (
            os.environ.get("FORKQ_LOG_FORMAT", "").lower() == "json" or not sys.stdout.isatty()
        )
    if os.environ.get("FORKQ_LOG_FORMAT", "").lower() == "console":
        json_lines = False
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if json_lines
        else structlog.dev.ConsoleRenderer(colors=sys.stdout.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _mask_secrets,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stdout),
        cache_logger_on_first_use=False,
    )


def get(**context: Any) -> Any:
    return structlog.get_logger().bind(**context)


def bind(**context: Any) -> None:
    """Bind process-wide context (role, pool, pid) after a fork."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(**context)
