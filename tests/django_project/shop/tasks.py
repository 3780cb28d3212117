"""The app's tasks, found by the daemon at boot (every installed app's `tasks` module)."""

import os
import signal
import time
from pathlib import Path

from django.db import connection
from django.db.backends.signals import connection_created

try:
    from django.tasks import task
except ImportError:  # before Django 6: the backport
    from django_tasks import task

OPENED = []  # each database connection this process opened (connection_created)


def _opened(sender, connection, **kwargs):
    OPENED.append(connection.alias)


connection_created.connect(_opened)


@task
def add(a, b):
    return a + b


@task(queue_name="reports", priority=10)
def report(name, *, rows=()):
    return {"name": name, "rows": list(rows), "pid": os.getpid()}


@task(takes_context=True)
def flaky(context, word):
    """Fails its first attempt, succeeds on the next: a retry with its error on record."""
    if context.attempt < 2:
        raise RuntimeError(f"flaky: attempt {context.attempt} of {word!r} fails")
    return {"word": word, "attempt": context.attempt, "result_id": context.task_result.id}


@task
def broken(reason):
    raise ValueError(reason)


@task
async def add_async(a, b):
    return a + b


@task
def noop():
    return None


@task
def unjsonable():
    return {1, 2}  # a set: no JSON for it, so the attempt fails


@task
def nap(seconds, started_file):
    """Says it started (a file), then sleeps: a test looks at it while it runs."""
    Path(started_file).write_text(str(os.getpid()), encoding="utf-8")
    time.sleep(seconds)
    return seconds


@task
def connections_opened():
    """How many connections this process has opened, and the server's id of this one."""
    with connection.cursor() as cursor:
        server_id = None
        if connection.vendor == "mysql":
            cursor.execute("SELECT CONNECTION_ID()")
            server_id = cursor.fetchone()[0]
        else:
            cursor.execute("SELECT 1")
    return {"pid": os.getpid(), "opened": len(OPENED), "server_id": server_id}


@task(takes_context=True)
def doomed(context, started_file):
    """Its worker is killed in its first attempt (as the OOM killer would); the next one
    returns the attempt number."""
    Path(started_file).write_text(str(os.getpid()), encoding="utf-8")
    if context.attempt < 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return context.attempt
