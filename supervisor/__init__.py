"""forkq: a job queue in your own MySQL/MariaDB or SQLite database, and its pre-fork daemon."""

from supervisor.errors import (
    Fail,
    JobTimeout,
    LockHeld,
    LockLost,
    PayloadTooLarge,
    Retry,
    Snooze,
)
from supervisor.models import Enqueued
from supervisor.queue import Queue
from supervisor.registry import handler
from supervisor.routing import Router

__all__ = [
    "Enqueued",
    "Fail",
    "JobTimeout",
    "LockHeld",
    "LockLost",
    "PayloadTooLarge",
    "Queue",
    "Retry",
    "Router",
    "Snooze",
    "handler",
]
__version__ = "0.1.0"
