"""structlog setup: one JSON object a line when stdout is not a TTY (journald), key=value on a terminal.

Every line is an event with a snake_case name and bound context (role, pool, pid,
job_id). Secrets never reach a log line: URLs are logged redacted, and any key that
looks like a secret is masked by a processor as a second line of defence.
"""

from __future__ import annotations

import json
import json.encoder
import logging
import math
import os
import re
import sys
import time
import traceback
from collections.abc import MutableMapping
from datetime import UTC, datetime
from typing import Any, TextIO

import structlog

from supervisor import events
from supervisor.escaping import for_terminal, lines_for_terminal
from supervisor.masking import masked

SECRET_KEY = re.compile("password|passwd|secret|token", re.IGNORECASE)


def _enrich(_: Any, method_name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Process context, level, UTC timestamp and masked secrets in one processor: every
    job writes a line, and each processor is a call per line (so each step here is one
    C call in the common case: no key shared with the context, no key unseen before)."""
    if _PROCESS_CONTEXT.keys().isdisjoint(event):
        event.update(_PROCESS_CONTEXT)
    else:
        for key, value in _PROCESS_CONTEXT.items():
            event.setdefault(key, value)
    event["level"] = _LEVEL_NAMES.get(method_name, method_name)
    event["timestamp"] = _timestamp(time.time_ns())
    # Key names are judged once; set operations (in C) then find the few secret ones.
    if not _JUDGED_KEYS.issuperset(event):
        unseen = event.keys() - _JUDGED_KEYS
        _JUDGED_KEYS.update(unseen)
        _SECRET_KEYS.update(key for key in unseen if SECRET_KEY.search(key))
    if not _SECRET_KEYS.isdisjoint(event):
        for key in _SECRET_KEYS.intersection(event):
            event[key] = "***"
    if "exc_info" in event:  # structlog's format_exc_info, called only where it has work
        return structlog.processors.format_exc_info(_, method_name, event)
    return event


def _timestamp(now_ns: int) -> str:
    """ISO 8601 UTC with microseconds, as datetime.isoformat gives it, the date and time of
    day formatted once a second: `2026-01-02T03:04:05.123456Z`. (Integers: no float
    rounding to mend, and a third cheaper.)"""
    global _SECOND, _SECOND_TEXT
    second, micros = divmod(now_ns // 1000, 1_000_000)
    if second != _SECOND:
        _SECOND_TEXT = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _SECOND = second
    return f"{_SECOND_TEXT}.{micros:06d}Z"


_SECOND = -1  # the second _SECOND_TEXT formats
_SECOND_TEXT = ""
_LEVEL_NAMES = {"warn": "warning", "exception": "error"}  # as structlog's add_log_level
_JUDGED_KEYS: set[str] = set()
_SECRET_KEYS: set[str] = set()


def _fallback(value: Any) -> Any:
    """What JSON cannot encode (an exception, a Path) is logged as its repr."""
    return repr(value)


# One encoder for every line: json.dumps with options builds a new one per call.
_LINE_ENCODER = json.JSONEncoder(default=_fallback)  # ASCII: no stdout encoding can refuse it


def _inert(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Console lines only: a value from a row (a handler or queue name, an error) shows
    its control characters as escapes, so it cannot drive the reader's terminal or start
    a line that looks like another event. A traceback keeps its line breaks."""
    for key, value in event.items():
        if isinstance(value, str):
            if key in ("exception", "stack"):
                event[key] = "\n".join(lines_for_terminal(value))
            else:
                event[key] = for_terminal(value)
    return event


# The same encoder's C core, made once: JSONEncoder.encode makes it again for every line.
# Without the circular-reference check (a circular value recurses, then the checking
# encoder above says what it says today).
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # None without _json
_FAST_LINE: Any = (
    _C_MAKE_ENCODER(
        None, _fallback, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    if _C_MAKE_ENCODER is not None
    else None
)


def _render_json(_: Any, __: str, event: MutableMapping[str, Any]) -> str:
    if _FAST_LINE is not None:
        try:
            return "".join(_FAST_LINE(event, 0))
        except RecursionError:
            pass
    return _LINE_ENCODER.encode(event)


class LineLogger:
    """structlog's output: each event as one line, written with one `write` call.

    The master and every child share stdout (journald's pipe). `print` writes the
    text and the newline separately, so two processes could splice their lines into
    one broken JSON object. A stdout that is gone (EPIPE, closed) drops the line: a
    log line never takes a worker down.
    """

    def __init__(self, file: TextIO) -> None:
        self._file = file

    def msg(self, message: str) -> None:
        try:
            self._file.write(message + "\n")
            self._file.flush()
        except (OSError, ValueError):
            pass

    log = debug = info = warn = warning = msg
    err = error = critical = exception = fatal = failure = msg


_TO_STDERR: list[bool] = [False]  # setup(to_stderr=): a command whose stdout is its output


def _line_logger(*args: Any) -> LineLogger:
    # Looked up per logger: tests and the CLI may swap stdout.
    return LineLogger(sys.stderr if _TO_STDERR[0] else sys.stdout)


def setup(level: str = "info", json_lines: bool | None = None, to_stderr: bool = False) -> None:
    """Configure structlog once per process (a forked child keeps the parent's setup).

    The daemon logs to stdout (journald); `to_stderr` for a command whose stdout is what
    it prints (a job id, a table, JSON), so a line a loaded module logs never joins it."""
    _TO_STDERR[0] = to_stderr
    stream = sys.stderr if to_stderr else sys.stdout
    if json_lines is None:
        json_lines = os.environ.get("FORKQ_LOG_FORMAT", "").lower() == "json" or not stream.isatty()
    if os.environ.get("FORKQ_LOG_FORMAT", "").lower() == "console":
        json_lines = False
    renderer: Any = (
        _render_json if json_lines else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    # JSON escapes control characters itself (and stays exact); a terminal needs _inert.
    inert = [] if json_lines else [_inert]
    global _DONE_LINES
    level_number = logging.getLevelName(level.upper())
    wrapper = structlog.make_filtering_bound_logger(level_number)
    _DONE_LINES = wrapper if json_lines and level_number <= logging.INFO else None
    _CONTEXT_TEXT.clear()
    structlog.configure(
        processors=[
            _enrich,
            *inert,
            renderer,
        ],
        wrapper_class=wrapper,
        logger_factory=_line_logger,
        cache_logger_on_first_use=False,
    )


class _FromStdlib(logging.Handler):
    """A library's own log records (django-tasks, PyMySQL, ...: the standard library's
    logging) as forkq lines, so the daemon's output stays one JSON object a line; without
    it Python prints them, tracebacks and all, as plain text on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = {"logger": record.name, "message": masked(record.getMessage())}
            if record.exc_info:  # a handler's exception: what it quotes is masked too
                fields["exception"] = masked("".join(traceback.format_exception(*record.exc_info)))
            log = get()
            say = getattr(log, record.levelname.lower(), log.warning)
            say(events.LIBRARY_LOG, **fields)
        except Exception:
            self.handleError(record)


def route_stdlib() -> None:
    """The daemon's processes (`run`, `work`): library records become forkq lines."""
    root = logging.getLogger()
    if not any(isinstance(handler, _FromStdlib) for handler in root.handlers):
        root.addHandler(_FromStdlib())


def get(**context: Any) -> Any:
    return structlog.get_logger().bind(**context)


def bind(**context: Any) -> None:
    """Bind process-wide context (role, pool, pid) after a fork; it replaces the old one
    (but for what `stick` set: a master of several databases names its own in every line)."""
    _PROCESS_CONTEXT.clear()
    _PROCESS_CONTEXT.update(_STICKY)
    _PROCESS_CONTEXT.update(context)
    _CONTEXT_TEXT.clear()


def stick(**context: Any) -> None:
    """Context kept by every later `bind`, in this process and the ones it forks."""
    _STICKY.update(context)
    _PROCESS_CONTEXT.update(context)
    _CONTEXT_TEXT.clear()


# One process, one context (forkq forks; it has no threads or tasks to tell apart), so a
# plain dict does what contextvars would, for a fraction of the cost per line.
_STICKY: dict[str, Any] = {}
_PROCESS_CONTEXT: dict[str, Any] = {}


# --- the line of a job done: one a job, so written without structlog's frames ----------------

# setup()'s wrapper class (its level) when it said JSON lines at info or below, else None.
_DONE_LINES: Any = None
_DONE_KEYS = ("job_id", "handler", "queue", "attempt", "outcome", "duration", "event")
# The process context as JSON members, made once per bind; None: a context key the line
# has too, or one _enrich treats apart, so such a line goes through structlog.
_CONTEXT_TEXT: list[str | None] = []
# Per (event, handler, queue): the handler and queue, and the event, as members.
_NAMES_TEXT: dict[tuple[str, str, str], tuple[str, str]] = {}
_NAMES_MOST = 4096  # triples remembered (handlers and queues are few; rows are not trusted)


def done_line(
    log: Any, event: str, job_id: int, handler: str, queue: str, attempt: int, duration: float
) -> bool:
    """Write, as `log.info(event, job_id=…, …, outcome="done", duration=…)` would, the
    line of a job that ended done (the same keys in the same order, secrets masked alike,
    to the same file) in a third of structlog's time: it was the largest single cost of a
    quick job. False when structlog must write it: `log` is not what setup() made at
    info or below for JSON lines (console lines, another level, another configuration,
    its processors changed since, as `capture_logs` does), it has bound context, or the
    process context has a key of the line."""
    if not _setups_json_logger(log) or not math.isfinite(duration):
        return False
    if not _CONTEXT_TEXT:
        _CONTEXT_TEXT.append(_context_members())
    context = _CONTEXT_TEXT[0]
    if context is None:
        return False
    names = _NAMES_TEXT.get((event, handler, queue))
    if names is None:
        if len(_NAMES_TEXT) >= _NAMES_MOST:
            _NAMES_TEXT.clear()
        names = (_members({"handler": handler, "queue": queue}), _members({"event": event}))
        _NAMES_TEXT[event, handler, queue] = names
    handler_queue, event_member = names
    log._logger.msg(
        f'{{"job_id": {int(job_id)}, {handler_queue}, "attempt": {int(attempt)},'
        f' "outcome": "done", "duration": {round(float(duration), 4)!r}, {event_member}{context}'
        f' "level": "info", "timestamp": "{_timestamp(time.time_ns())}"}}'
    )
    return True


def _setups_json_logger(log: Any) -> bool:
    """`log` is a logger of setup()'s JSON configuration, as it is now: its level's class,
    no bound context, its processors still `_enrich` and `_render_json` (`capture_logs`
    changes that list in place), its output a LineLogger. (`_logger` is structlog's
    documented wrapped logger; `_processors` and `_context` are what BoundLoggerBase
    keeps them in.)"""
    if _DONE_LINES is None or type(log) is not _DONE_LINES:
        return False
    processors = getattr(log, "_processors", None)
    return (
        isinstance(processors, list)
        and len(processors) == 2
        and processors[0] is _enrich
        and processors[1] is _render_json
        and not getattr(log, "_context", True)
        and isinstance(getattr(log, "_logger", None), LineLogger)
    )


def _members(values: dict[str, Any]) -> str:
    """`{"a": 1, "b": 2}` as `"a": 1, "b": 2`, rendered as every line is."""
    return _render_json(None, "", values)[1:-1]


def _context_members() -> str | None:
    """The process context as `, "k": v, …,` (secret-looking keys masked), or None when
    one of its keys is a key of the line."""
    if not _PROCESS_CONTEXT.keys().isdisjoint((*_DONE_KEYS, "level", "timestamp", "exc_info")):
        return None
    masked = {k: "***" if SECRET_KEY.search(k) else v for k, v in _PROCESS_CONTEXT.items()}
    return f", {_members(masked)}," if masked else ","
