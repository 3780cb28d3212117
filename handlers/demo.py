"""Example handlers: one of each thing a real handler does.

Enqueue them with `python handlers/demo_enqueue.py` while `forkq run -c deploy/forkq.toml`
runs. A handler is `def f(payload: dict, job) -> None`: it returns to succeed, raises
`Retry(delay=...)` to ask for another attempt after a given delay, raises `Fail(...)`
for a failure that no retry can fix (the job goes straight to dead), and any other
exception means "retry later with exponential backoff, dead after max_attempts".

Handlers run in a forked worker and may be run more than once for the same job (at
least once delivery: a worker can die after the work but before the ack), so real
handlers should be idempotent.
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any, Protocol

from supervisor import Fail, Retry, handler, logs


class Job(Protocol):
    """What a handler may use of the job it runs (the worker passes the real object)."""

    @property
    def id(self) -> int:
        """The job's row id, as `enqueue` returned it."""
        ...

    @property
    def queue(self) -> str:
        """The queue (pool) it was claimed from."""
        ...

    @property
    def attempts(self) -> int:
        """Attempts started so far, this one included: 1 on the first run."""
        ...

    @property
    def enqueued_at(self) -> datetime:
        """When it was enqueued (UTC)."""
        ...

    def heartbeat(self) -> None:
        """Extend the job's lease, so a long job is not taken for a dead one."""
        ...


def _seconds(payload: dict[str, Any], key: str, default: float) -> float:
    """A duration from the payload; a value that is not a number can never succeed: Fail."""
    value = payload.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Fail(f"payload[{key!r}] must be a number of seconds, got {value!r}")
    return max(0.0, float(value))


def _sleep(seconds: float, job: Job) -> None:
    """Sleep in one-second slices, heartbeating between them when the sleep is long.

    A short sleep fits easily in the lease the claim gave; a long one renews the lease
    every second, which is what a long real job (a report, a big export) should do.
    """
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        time.sleep(min(1.0, remaining))
        if seconds > 1.0:
            job.heartbeat()


@handler("demo.echo")
def echo(payload: dict[str, Any], job: Job) -> None:
    """Log the payload: the smallest possible handler."""
    logs.get(handler="demo.echo", job_id=job.id).info(
        "demo_echo", payload=payload, attempt=job.attempts
    )


@handler("demo.sleep")
def sleep(payload: dict[str, Any], job: Job) -> None:
    """Sleep payload["seconds"] (default 1). Past the pool's `timeout` the job is killed."""
    seconds = _seconds(payload, "seconds", 1.0)
    log = logs.get(handler="demo.sleep", job_id=job.id)
    log.info("demo_sleep_started", seconds=seconds)
    _sleep(seconds, job)
    log.info("demo_sleep_finished", seconds=seconds)


@handler("demo.fail", max_attempts=3)
def fail(payload: dict[str, Any], job: Job) -> None:
    """Always fail: retried with backoff and dead after 3 attempts, or dead at once.

    `{"permanent": true}` raises `Fail`, the way to say "retrying cannot help" (bad
    input, a deleted account): no retries, the job is dead with this message.
    """
    if payload.get("permanent"):
        raise Fail("demo.fail: permanent failure requested by the payload")
    raise RuntimeError(f"demo.fail: failing on purpose (attempt {job.attempts})")


@handler("demo.flaky")
def flaky(payload: dict[str, Any], job: Job) -> None:
    """Fail the first payload["fail_times"] attempts (default 2), then succeed.

    Shows `Retry(delay=...)`: the handler chooses the delay (here 1 s) instead of the
    exponential backoff. The job dies if fail_times reaches max_attempts (default 10).
    """
    fail_times = payload.get("fail_times", 2)
    if isinstance(fail_times, bool) or not isinstance(fail_times, int):
        raise Fail(f"payload['fail_times'] must be an integer, got {fail_times!r}")
    log = logs.get(handler="demo.flaky", job_id=job.id, attempt=job.attempts)
    if job.attempts <= fail_times:
        log.info("demo_flaky_failing", fail_times=fail_times)
        raise Retry(delay=1, reason=f"demo.flaky: attempt {job.attempts} of {fail_times} to fail")
    log.info("demo_flaky_succeeded", fail_times=fail_times)


@handler("demo.email", queue="email", max_attempts=5)
def email(payload: dict[str, Any], job: Job) -> None:
    """Pretend to send a mail: log it after a short pause standing in for SMTP.

    Registered on the "email" queue, so `enqueue("demo.email", ...)` lands there and
    the email pool's workers run it. A payload without "to" can never be sent: Fail.
    """
    to = payload.get("to")
    if not isinstance(to, str) or "@" not in to:
        raise Fail(f"demo.email: payload needs a 'to' address, got {to!r}")
    _sleep(_seconds(payload, "latency", 0.2), job)
    logs.get(handler="demo.email", job_id=job.id).info(
        "demo_email_sent", to=to, subject=str(payload.get("subject", "(no subject)"))
    )


@handler("demo.report", queue="reports")
def report(payload: dict[str, Any], job: Job) -> None:
    """Pretend to build a report: a longer job that heartbeats while it works.

    The "reports" pool keeps finished jobs (`on_success = "keep"`), so `forkq jobs
    --status done` shows them for an hour.
    """
    name = str(payload.get("name", "daily"))
    seconds = _seconds(payload, "seconds", 2.0)
    log = logs.get(handler="demo.report", job_id=job.id, report=name)
    log.info("demo_report_started", seconds=seconds)
    _sleep(seconds, job)
    age = time.time() - job.enqueued_at.timestamp()
    log.info("demo_report_finished", since_enqueued=round(age, 3))
