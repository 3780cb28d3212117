"""The daemon side of the Django backend: Django set up once before the fork, and the
forkq handlers (each task's path, and "django.task") that run a task and record each
attempt's result.

`forkq run` imports its handler modules in the master before it forks any child, so
`boot()` runs there: `django.setup()`, then every installed app's `tasks` module, then
every module-level Task of what is imported is remembered (django_results.py). Django's
database connections are closed before the first fork: each child opens its own on
first use, and never shares a socket with the master or a sibling.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from django.db import close_old_connections, connections

from supervisor import events, logs, registry
from supervisor.errors import ConfigError, Fail

from . import django_results as results
from .django_attempts import misses_attempts, with_lost_attempts
from .django_compat import TaskContext, task_backends, task_finished, task_started
from .django_store import usable_connection

_booted = False
RECORD_PATIENCE = 60.0  # seconds an attempt's record waits for a locked SQLite database


def booted() -> bool:
    return _booted


def boot() -> None:
    """Set Django up in this process (once) and register the forkq handlers (each call,
    as a reload forgets them): each task's path, and "django.task" for older rows."""
    global _booted
    if not _booted:
        _setup_django()
        _booted = True
    registry.handler(results.HANDLER)(run_task)
    for path, task in sorted(results.known_tasks().items()):
        if len(path) > results.MAX_HANDLER:
            continue  # enqueued as "django.task"
        taken = registry.get(path)
        if taken is not None and taken.func is not run_task:
            raise ConfigError(
                f"supervisor.contrib.django: the Django task {path!r} has the name of a forkq"
                " handler registered by another module; rename one"
            )
        registry.handler(path, queue=task.queue_name)(run_task)


def _setup_django() -> None:
    import django
    from django.conf import settings
    from django.utils.module_loading import autodiscover_modules

    if not os.environ.get("DJANGO_SETTINGS_MODULE") and not settings.configured:
        raise ConfigError(
            "supervisor.contrib.django: DJANGO_SETTINGS_MODULE is not set; set it in forkq's"
            " environment (e.g. Environment=DJANGO_SETTINGS_MODULE=mysite.settings in the"
            " systemd unit) and put the project on PYTHONPATH"
        )
    try:
        django.setup()
        persistent = _keep_connections()
        autodiscover_modules("tasks")  # each installed app's tasks.py
        count = results.remember_imported()
    except ConfigError:
        raise
    except Exception as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(
            f"supervisor.contrib.django: Django set-up failed: {type(exc).__name__}: {detail}"
        ) from exc
    finally:
        connections.close_all()  # nothing of the master's crosses a fork
    logs.get().info(
        events.DJANGO_READY,
        settings=os.environ.get("DJANGO_SETTINGS_MODULE"),
        tasks=count,
        persistent_connections=persistent,
    )


def _keep_connections() -> list[str]:
    """Make each DATABASES alias with CONN_MAX_AGE = 0 (Django's default) persistent in
    this daemon, with CONN_HEALTH_CHECKS on; the aliases changed.

    Django closes a connection of age 0 at the end of each request; the worker treats a
    task as a request (close_old_connections before and after it), so every task paid a
    new connection (183 ms against 7.6 ms for a trivial task on MariaDB). Kept instead,
    the connection is checked before each task's first query (a ping) and replaced when
    broken; one with an error is closed when unusable, one whose transaction the task left
    open is closed, and a positive CONN_MAX_AGE still expires, as in Django's request cycle.
    Only this process's copy of the settings changes: the application's is its own.
    """
    changed = []
    for alias in connections:
        params = connections.settings[alias]
        if params.get("CONN_MAX_AGE") == 0:
            params["CONN_MAX_AGE"] = None
            params["CONN_HEALTH_CHECKS"] = True
            changed.append(alias)
    return changed


def run_task(payload: Any, job: Any) -> Any:
    """The forkq handler: look the task up (never import it), run it, record the attempt.

    A task that raises fails the attempt: forkq retries it with backoff while attempts
    are left (max_attempts), else the job ends dead. What the task raised, and what it
    returned, go to forkq_results, read by ForkqBackend.get_result.
    """
    pid = os.getpid()
    payload = _payload(payload)
    if not results.runs_task(job.handler, payload):
        raise Fail(
            f"the job's handler {job.handler!r} is a Django task's, but its payload names"
            f" the task {payload['task']!r}: a job runs only the task it is enqueued under"
        )
    attempt = Attempt(job, payload)
    task = attempt.task
    context = attempt.running()
    task_started.send(type(attempt.backend), task_result=context)
    args, kwargs = attempt.payload["args"], attempt.payload["kwargs"]
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=context), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
    except BaseException as exc:
        if os.getpid() == pid:  # never in a copy the task forked: see the worker's loop
            _once_ended(job, partial(attempt.finish, "failed", error=exc))
        raise
    try:
        returned = results.encode_json(value)
    except Exception as exc:  # no retry mends it, and each would run the task's work again
        _once_ended(job, partial(attempt.finish, "failed", error=exc))
        raise Fail(f"its return value is not JSON: {type(exc).__name__}: {exc}") from exc
    _once_ended(job, partial(attempt.finish, "succeeded", returned=returned))
    return value  # what a pool with keep_result keeps, on the row to be written: the same


def _once_ended(job: Any, record: Callable[[], None]) -> None:
    """Record the attempt once the task has returned, outside the job's timeout: a write
    that waits for SQLite's lock (an application's long transaction) no longer times the
    attempt out, which ran the task again. At once where the worker cannot defer it."""
    defer = getattr(job, "after_attempt", None)
    if defer is None:
        record()
    else:
        defer(record)


def _payload(payload: Any) -> dict[str, Any]:
    try:
        return results.checked_payload(payload)
    except ValueError as exc:
        raise Fail(f"not a Django task payload: {exc}") from exc


def _database_of(backend: Any, queue: str) -> str:
    """The alias holding the job's queue (`queue_databases`), its backend's `database` else."""
    database_for = getattr(backend, "database_for", None)
    return str(database_for(queue)) if database_for else getattr(backend, "database", "default")


class Attempt:
    """One attempt of a task, and its record in forkq_results, which is written on the
    connection of the task's backend's database (forkq's tables live there)."""

    def __init__(self, job: Any, payload: dict[str, Any]) -> None:
        try:
            task = results.task_of(payload)
        except Exception as exc:  # its backend or queue is no longer configured
            raise Fail(f"Django task {payload['task']!r}: {type(exc).__name__}: {exc}") from exc
        if task is None:
            raise Fail(
                f"Django task {payload['task']!r} is not defined in this daemon: no installed"
                " app's tasks module (nor a module they import) defines it, and a task named"
                " by a job is never imported"
            )
        self.task = task
        self.backend = task_backends[task.backend]
        self.job = job
        self.payload = payload
        self.started = time.time()
        self.worker = f"{socket.gethostname()}:{os.getpid()}"  # until the lease's name is read
        self.connection = connections[_database_of(self.backend, job.queue)]
        self.store = results.store_for(self.connection)
        self.previous: dict[str, Any] = {}

    def running(self) -> Any:
        """The TaskResult the task's context and task_started see: this attempt running."""
        close_old_connections()  # as a request would: a connection past its age is renewed
        try:
            usable_connection(self.connection)
            raw = self.connection.connection
            with self.connection.wrap_database_errors:
                previous = self.store.result_on(raw, self.job.id)
                held = self.store.result_job_on(raw, self.job.id)
                if held is not None and misses_attempts(held, previous):
                    history = self.store.attempts_on(raw, self.job.id)
                    previous = with_lost_attempts(held, previous, history)
            if previous and results.same_enqueue(previous, self.payload):
                self.previous = previous  # not an earlier job's that had the same id
            if held is not None and held["locked_by"]:
                self.worker = str(held["locked_by"])  # the lease name, as forkq status shows
        except Exception as exc:  # the task still runs: its record is best effort
            logs.get().warning(events.DJANGO_RESULT_UNREADABLE, job_id=self.job.id, error=str(exc))
        job = {
            "id": self.job.id,
            "handler": self.job.handler,
            "payload": results.encode_json(self.payload),
            "status": "running",
            "attempts": self.job.attempts,
            "locked_by": None,
            "last_error": None,
            "enqueued_at": self.job.enqueued_at.timestamp(),
            "started_at": self.started,
            "finished_at": None,
        }
        record = {
            **self.previous,
            "payload": job["payload"],
            "workers": results.encode_json(self._workers()),
        }
        return results.build_result(job, record, task=self.task)

    def finish(
        self, status: str, *, error: BaseException | None = None, returned: str = ""
    ) -> None:
        """Write this attempt's end and send task_finished. A database that refuses the
        write is logged, never raised: the task's outcome stands (forkq_jobs has it)."""
        close_old_connections()  # a transaction the task left open is not ours to commit
        errors = results.json_list(self.previous.get("errors"))
        if error is not None:
            kind = type(error)
            errors.append(
                {
                    "attempt": self.job.attempts,
                    "exception_class_path": f"{kind.__module__}.{kind.__qualname__}",
                    "traceback": "".join(traceback.format_exception(error)),
                }
            )
        first = self.previous.get("started_at")
        saved = {
            "job_id": self.job.id,
            "queue": self.job.queue,
            "status": status,
            "payload": results.encode_json(self.payload),
            "return_value": returned if status == "succeeded" else None,
            "errors": results.encode_json(errors),
            "workers": results.encode_json(self._workers()),
            "enqueued_at": self.job.enqueued_at.timestamp(),
            "started_at": self.started if first is None else float(first),
            "attempted_at": self.started,
            "finished_at": time.time(),
        }
        self._save({**saved, "id": self.job.id})
        result = results.build_result(None, saved, task=self.task, result_id=str(self.job.id))
        if error is None:
            task_finished.send(type(self.backend), task_result=result)
            return
        try:  # receivers log a failure with logger.exception: its exception is the current one
            raise error
        except BaseException:
            task_finished.send(type(self.backend), task_result=result)

    def _save(self, saved: dict[str, Any]) -> None:
        """Write the record; a SQLite write lock another transaction holds is waited for up
        to RECORD_PATIENCE (outside the job's timeout), as forkq waits to write an outcome."""
        deadline = time.monotonic() + RECORD_PATIENCE
        while True:
            try:
                usable_connection(self.connection)
                with self.connection.wrap_database_errors:
                    self.store.save_result_on(self.connection.connection, saved)
                return
            except Exception as exc:
                if "locked" in str(exc) and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                logs.get().warning(
                    events.DJANGO_RESULT_NOT_SAVED, job_id=self.job.id, error=str(exc)
                )
                return

    def _workers(self) -> list[Any]:
        """The workers of the recorded attempts, and this one."""
        return [*results.json_list(self.previous.get("workers")), self.worker]
