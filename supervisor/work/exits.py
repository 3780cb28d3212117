"""A command's exit status read as the worker reads a Python handler's end.

0 returns; 65 (EX_DATAERR) raises Fail; 75 (EX_TEMPFAIL) raises Snooze with a last
stderr line `forkq-snooze: DURATION`, else Retry (after `forkq-retry-after: DURATION`
when given); anything else, a signal included, raises CommandFailed. The message is
the status and the last stderr line, then the tail of stderr (work/command.py, the
module's doc, has the contract).
"""

from __future__ import annotations

import re
import signal
from typing import Any

from supervisor import events
from supervisor.durations import parse_duration
from supervisor.errors import Fail, Retry, Snooze
from supervisor.policy import MAX_DELAY
from supervisor.work.snooze import snooze_request

EX_DATAERR = 65  # sysexits.h: the input was bad; no retry can help
EX_TEMPFAIL = 75  # sysexits.h: try again later
# Of the stderr tail, what fits last_error (4,000 characters) with its summary line.
ERROR_CHARS = 3600
SUMMARY_CHARS = 200  # of the last stderr line, repeated first as last_error's summary
MAX_RETRY_AFTER = MAX_DELAY  # seconds a program may ask to wait, at most (a year)
RETRY_AFTER = re.compile(r"^forkq-retry-after:\s*(.*?)\s*$")
PROGRESS_PREFIX = "forkq-progress:"  # a report (command.progress_line), not a diagnostic
PHP_FATAL = re.compile(r"(PHP )?Fatal error: ")  # php-cli's uncaught exception, first line


class CommandFailed(Exception):
    """the command failed."""


def judge(status: int, stderr: bytes, cut: bool, log: Any) -> None:
    """The exit status as the worker understands a handler: return, Fail, Retry, raise."""
    if status == 0:
        return
    text = error_text(stderr, cut)
    if status == EX_DATAERR:
        raise Fail(with_stderr("exit 65 (EX_DATAERR)", text))
    if status == EX_TEMPFAIL:
        snooze = snooze_request(text)
        if snooze is not None:  # work/snooze.py reads its line
            raise Snooze(snooze[0], with_stderr("exit 75 (EX_TEMPFAIL)", snooze[1]))
        delay, text = retry_after(text, log)
        raise Retry(delay, with_stderr("exit 75 (EX_TEMPFAIL)", text))
    raise CommandFailed(with_stderr(describe_status(status), text))


def describe_status(status: int) -> str:
    if status >= 0:
        return f"exit {status}"
    try:
        return f"killed by {signal.Signals(-status).name}"
    except ValueError:
        return f"killed by signal {-status}"


def error_text(tail: bytes, cut: bool) -> str:
    """The stderr tail as text: a UTF-8 sequence split by the cut is dropped, not garbled,
    and progress reports left out (a program killed mid-report said nothing else last)."""
    if cut:
        start = 0
        while start < min(4, len(tail)) and 0x80 <= tail[start] < 0xC0:
            start += 1
        tail = tail[start:]
    text = tail.decode("utf-8", "replace").rstrip()
    if PROGRESS_PREFIX in text:
        lines = text.split("\n")
        text = "\n".join(x for x in lines if not x.startswith(PROGRESS_PREFIX)).rstrip()
    if cut or len(text) > ERROR_CHARS:
        text = "..." + text[-ERROR_CHARS:]
    return text


def retry_after(text: str, log: Any) -> tuple[float | None, str]:
    """(delay, text without it) from a last stderr line `forkq-retry-after: DURATION`;
    (None, text) when there is none. One that names no duration is said in the log, as
    is a `forkq-snooze:` line snooze_request refused."""
    head, _, last = text.rpartition("\n")
    if last.startswith("forkq-snooze:"):
        reason = "not a duration of at most a year"
        log.warning(events.COMMAND_SNOOZE_IGNORED, line=last[:200], reason=reason)
        return None, text
    match = RETRY_AFTER.match(last)
    if not match:
        return None, text
    try:
        delay = parse_duration(match.group(1))
        if delay > MAX_RETRY_AFTER:
            raise ValueError(f"more than a year ({MAX_RETRY_AFTER:.0f} s)")
    except ValueError as exc:
        log.warning(events.COMMAND_RETRY_AFTER_IGNORED, line=last[:200], reason=str(exc))
        return None, text
    return delay, head.rstrip()


def with_stderr(what: str, text: str) -> str:
    """`what: LAST LINE`, then the whole tail when it has more lines: the first line of
    last_error is its summary (status, the jobs list, the dashboard, the log), and a
    program's last words are what says why it failed (SPEC: its last non-empty line)."""
    if not text:
        return f"{what} (nothing on stderr)"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) <= 1:
        return f"{what}: {text.strip()}"
    last = summary_line(lines)
    last = last if len(last) <= SUMMARY_CHARS else last[: SUMMARY_CHARS - 3] + "..."
    return f"{what}: {last}\n{text}"


def summary_line(lines: list[str]) -> str:
    """The line that says why: the last one, but for PHP's uncaught exception, whose trace
    ends `thrown in FILE on line N`; its `PHP Fatal error:  Uncaught ...` line says why."""
    if lines[-1].startswith("thrown in "):
        for line in reversed(lines):
            if PHP_FATAL.match(line):
                return line
    return lines[-1]
