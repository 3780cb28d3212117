"""Snooze: a handler asks to run its job again later without using an attempt.

A Python handler raises `Snooze(delay)`. A command handler (work/command.py) asks the
same way through its exit status: exit 75 (EX_TEMPFAIL, "try again later") with the
last line of stderr

    forkq-snooze: DURATION        (30, "90s", "5m", ...; at most MAX_SNOOZE)

is a snooze, where `forkq-retry-after: DURATION` (or no such line) is a retry that
uses an attempt. The runner turns it into `Snooze(delay, reason)` with
`snooze_request(stderr_text)`, or returns `snooze_outcome(delay, reason)` where the
worker's `run_attempt` (work/attempt.py) returns an attempt's outcome.

The job goes back to `ready` (`scheduled` past the promotion horizon) after the delay,
its `attempts` as before the claim, `snoozes` one more; past the handler's max_snoozes
(100 unless `@handler(max_snoozes=...)` says) it ends `dead` with a message that says
so, so a handler that snoozes forever by mistake is seen.
"""

from __future__ import annotations

import re

from supervisor.durations import parse_duration
from supervisor.outcomes import Attempt, Outcome
from supervisor.policy import MAX_DELAY, clamp_delay

SNOOZED = Outcome.SNOOZED  # the outcome of a snoozed attempt (job_finished, metrics)
SNOOZE_EXIT = 75  # EX_TEMPFAIL, with a `forkq-snooze:` last line on stderr
MAX_SNOOZE = MAX_DELAY  # seconds one snooze may ask for, at most (a year)
DIRECTIVE = re.compile(r"^forkq-snooze:\s*(.*?)\s*$")


def snooze_outcome(delay: float, reason: str = SNOOZED.value) -> Attempt:
    """An attempt that snoozed for `delay` seconds, as run_attempt returns outcomes:
    no error, not permanent; `reason` is logged with it."""
    return Attempt(SNOOZED, reason, clamp_delay(delay), False)


def snooze_request(text: str) -> tuple[float, str] | None:
    """(delay, the text without that line) when the last line of `text` (a command's
    stderr) is `forkq-snooze: DURATION`; None when it is not, or names no duration."""
    head, _, last = text.rstrip().rpartition("\n")
    match = DIRECTIVE.match(last)
    if not match:
        return None
    try:
        delay = parse_duration(match.group(1))
    except ValueError:
        return None
    if delay > MAX_SNOOZE:
        return None
    return delay, head.rstrip() or SNOOZED.value  # the reason, when no text is left
