"""The one exception tree of forkq, the exit codes the CLI maps it to, and the command
that installs a missing optional extra.

Each class's docstring is its default message. Nothing here imports another
forkq module, so every module can import this one.
"""

from __future__ import annotations

import math
import numbers
import shlex
import sys
from enum import IntEnum
from pathlib import Path


def install_hint(extra: str) -> str:
    """A command that installs forkq's `extra` into this very environment, as written.

    forkq is not on a package index: from a checkout (this one, editable, when forkq
    runs from it), else the wheel `make dist` builds in a checkout.
    """
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "supervisor" / "errors.py").is_file():
        return f"{pip} -e {shlex.quote(f'{root}[{extra}]')}"
    return (
        f"{pip} '/path/to/forkq[{extra}]' (a checkout), or"
        f" {pip} 'forkq-VERSION-py3-none-any.whl[{extra}]' (the wheel `make dist` builds)"
    )


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    CONFIG = 78  # EX_CONFIG: systemd's RestartPreventExitStatus keeps it from looping


class ForkqError(Exception):
    """forkq failed."""

    exit_code = ExitCode.FAILURE

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class ConfigError(ForkqError):
    """the configuration is invalid."""

    exit_code = ExitCode.CONFIG


class UsageError(ForkqError):
    """bad command-line usage."""

    exit_code = ExitCode.USAGE


class DatabaseError(ForkqError):
    """the database failed."""


class ConnectionLost(DatabaseError):
    """the database connection was lost or could not be opened."""


class TransientDatabaseError(DatabaseError):
    """a deadlock or lock-wait timeout; the operation can be retried."""


class DatabaseRefused(DatabaseError):
    """the database answered and refused the daemon's boot: a password, a grant, a name."""


class DuplicateKey(DatabaseError):
    """a row with that key already exists."""


# Not a DatabaseError: the database is fine, and sending the same job again fails again.
class PayloadTooLarge(ForkqError):
    """the job is larger than the database accepts in one statement."""


class SchemaError(ForkqError):
    """the database schema is missing or too old: run `forkq schema apply`."""


class TablesMissing(DatabaseError, SchemaError):
    """forkq's tables are not in this database (a producer before `forkq schema apply`)."""


class JobNotFound(ForkqError):
    """no such job."""


class LockHeld(ForkqError):
    """the lock is held by another owner."""


class LockLost(ForkqError):
    """the lock expired or was taken over before it was renewed or released."""


class JobTimeout(BaseException):
    """the job ran past its timeout.

    A BaseException, so a handler's `except Exception` cannot swallow it.
    """


class JobCancelled(JobTimeout):
    """the job was cancelled while it ran (`forkq work`: no master kills it there). A
    JobTimeout, so it ends the handler the same way; its outcome is never written (the row
    is cancelling: the worker ends it cancelled)."""


RETRY_REQUESTED = "retry requested"  # a Retry's reason when it gives none


class Retry(Exception):
    """Raised by a handler to ask for another attempt after `delay` seconds (None: the
    handler's backoff; at most a year, policy.MAX_DELAY)."""

    def __init__(self, delay: float | None = None, reason: str = RETRY_REQUESTED) -> None:
        super().__init__(reason)
        if delay is not None and (
            isinstance(delay, bool)
            or not isinstance(delay, numbers.Real)  # numpy's numbers too
            or not math.isfinite(delay)
        ):
            # A ValueError from the handler is a failure like any other: the attempt counts.
            raise ValueError(f"Retry needs a finite delay in seconds (or None), got {delay!r}")
        self.delay = None if delay is None else float(delay)
        self.reason = reason


class Fail(Exception):
    """Raised by a handler for a permanent failure: the job goes straight to dead."""


class Snooze(Exception):
    """Raised by a handler to run the job again after `delay` seconds without using an
    attempt: it is waiting on something that is not an error (a resource not ready yet).
    Each snooze is counted on the job; past its handler's max_snoozes the job ends dead."""

    def __init__(self, delay: float, reason: str = "snoozed") -> None:
        super().__init__(reason)
        if isinstance(delay, bool) or not isinstance(delay, int | float):
            raise ValueError(f"Snooze needs a delay in seconds >= 0, got {delay!r}")
        if not math.isfinite(delay) or delay < 0:
            raise ValueError(f"Snooze needs a delay in seconds >= 0, got {delay!r}")
        self.delay = float(delay)
        self.reason = reason
