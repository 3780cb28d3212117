"""What the Django backend and its daemon side share: the tasks this process knows, the
job payload, forkq's store on Django's own connection, and TaskResults read from rows.

A job row names its task by module path. The path is looked up among the Task objects
this process already holds (those created through a ForkqBackend, and those found at
module level in the modules imported when the daemon set Django up); it is never
imported. So a row, whoever wrote it, can make the daemon run only what the project
defines as a task.
"""

from __future__ import annotations

import json
import sys
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from django.conf import settings
from django.utils import timezone

from supervisor.models import utc

from .django_compat import Task, TaskError, TaskResult, TaskResultDoesNotExist, TaskResultStatus
from .django_store import database_url as database_url  # the backend's and worker's
from .django_store import queue_for as queue_for
from .django_store import store_for as store_for

# A task is enqueued under its own path as the forkq handler ("shop.tasks.send_invoice"),
# so `forkq jobs`, status, the dashboard and metrics name it; the daemon registers the
# path of every task it found at boot (django_worker.boot). "django.task" is the handler
# of rows written before that, and of a task whose path is longer than a handler name.
HANDLER = "django.task"
MAX_HANDLER = 191  # forkq_jobs.handler

# Django's statuses. TaskResultStatus is a TextChoices: without Django's type stubs mypy
# reads its members as the tuples they are declared with.
READY, RUNNING, SUCCESSFUL, FAILED = (
    cast(TaskResultStatus, getattr(TaskResultStatus, name))
    for name in ("READY", "RUNNING", "SUCCESSFUL", "FAILED")
)
# forkq_jobs.status -> what Django calls it. A job waiting for a retry is READY again;
# `cancelled` is Django's FAILED (it never ran to the end).
JOB_STATUS = {
    "waiting": READY,  # on a parent (depends_on): not started yet
    "ready": READY,
    "scheduled": READY,
    "running": RUNNING,
    "cancelling": RUNNING,
    "done": SUCCESSFUL,
    "dead": FAILED,
    "cancelled": FAILED,
}
# forkq_results.status (how the latest recorded attempt ended), once the job row is gone.
RESULT_STATUS = {"succeeded": SUCCESSFUL, "failed": FAILED}
FINISHED = frozenset({SUCCESSFUL, FAILED})

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


class TaskAttemptLost(Exception):
    """An attempt ended outside the task: its worker was killed (out of memory, past the
    pool's timeout), or its lease ran out. The error's traceback is forkq's last_error."""


class TaskCancelled(Exception):
    """The job was cancelled (`forkq cancel`, `Queue.cancel`) before it could succeed."""


# --- the tasks this process knows ------------------------------------------------------------

_KNOWN: dict[str, Task[Any, Any]] = {}


def remember(task: Task[Any, Any]) -> None:
    """Keep the first Task seen for its module path (the payload carries the rest)."""
    _KNOWN.setdefault(task.module_path, task)


def known_task(path: str) -> Task[Any, Any] | None:
    return _KNOWN.get(path)


def known_tasks() -> dict[str, Task[Any, Any]]:
    return dict(_KNOWN)


def handler_for(task: Task[Any, Any]) -> str:
    """The forkq handler a task's jobs are enqueued under: its path, when it fits."""
    path = task.module_path
    return path if len(path) <= MAX_HANDLER else HANDLER


def runs_task(handler: str, payload: dict[str, Any]) -> bool:
    """Whether a job of `handler` may run the task its payload names: under the task's
    own path, or under "django.task" (older rows, long paths), never another task's."""
    return handler in (HANDLER, payload["task"])


def remember_imported() -> int:
    """Remember every module-level Task of every module imported so far; how many.

    Run at the daemon's boot, after the apps' `tasks` modules were imported: a task made
    for another backend (and switched with `.using(backend=...)` when enqueued) never
    went through ForkqBackend.validate_task, yet its row must find it.
    """
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            # type(), not isinstance(): that asks a lazy object (admin.site, settings)
            # for its __class__, which sets it up.
            if issubclass(type(value), Task):
                remember(value)
    return len(_KNOWN)


# --- the payload -------------------------------------------------------------------------------


def encode_payload(task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The job's payload: the task's path and call, what rebuilds the Task exactly, and the
    random token of its result id (see result_id_of)."""
    return {
        "task": task.module_path,
        "token": uuid.uuid4().hex,
        "args": args,
        "kwargs": kwargs,
        "backend": task.backend,
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": None if task.run_after is None else task.run_after.isoformat(),
    }


def result_id_of(job_id: int, payload: dict[str, Any]) -> str:
    """A TaskResult's id: `JOBID-TOKEN`, the job id and the random token its payload holds.

    The job id alone could name another task: SQLite hands a rolled-back transaction's id
    to the next job, and a database may reuse the id of a deleted row. The token never
    repeats, so an id names one enqueue forever. Rows enqueued before the token was
    added (no token) keep their plain job id."""
    token = payload.get("token")
    return f"{job_id}-{token}" if isinstance(token, str) and token else str(job_id)


def same_enqueue(record: dict[str, Any], payload: dict[str, Any]) -> bool:
    """Whether a forkq_results row is that of the job whose payload is `payload` (the same
    token), not of an earlier job that had the same id."""
    try:
        recorded = json.loads(record.get("payload") or "{}")
    except ValueError:
        return False
    return isinstance(recorded, dict) and recorded.get("token") == payload.get("token")


def decode_payload(text: str) -> dict[str, Any]:
    """The payload as written by encode_payload; ValueError if it is not one."""
    return checked_payload(json.loads(text))


def checked_payload(payload: Any) -> dict[str, Any]:
    """`payload` if it has what a Django task's payload has; ValueError if not."""
    if not (
        isinstance(payload, dict)
        and isinstance(payload.get("task"), str)
        and isinstance(payload.get("args"), list)
        and isinstance(payload.get("kwargs"), dict)
        and isinstance(payload.get("backend"), str)
    ):
        raise ValueError("not a Django task payload (task, args, kwargs, backend)")
    return payload


def task_of(payload: dict[str, Any]) -> Task[Any, Any] | None:
    """The Task a payload names, as it was enqueued; None if this process knows no such
    task. Never imports anything: see the module docstring."""
    known = known_task(payload["task"])
    if known is None:
        return None
    run_after = payload.get("run_after")
    return replace(
        known,
        backend=payload["backend"],
        queue_name=payload.get("queue_name", known.queue_name),
        priority=payload.get("priority", known.priority),
        run_after=None if run_after is None else datetime.fromisoformat(run_after),
    )


def encode_json(value: Any) -> str:
    """JSON text of a task's return value; TypeError / ValueError if it has none (a lone
    surrogate passes the encoder, and no database takes it: UnicodeEncodeError)."""
    text = _ENCODER.encode(value)
    text.encode("utf-8")
    return text


# --- results -------------------------------------------------------------------------------


def build_result(
    job: dict[str, Any] | None,
    record: dict[str, Any] | None,
    task: Task[Any, Any] | None = None,
    result_id: str = "",
) -> TaskResult[Any]:
    """A TaskResult from the job row (or its archived row) and the forkq_results row.

    The job row, while it exists, says where the task stands; once it is gone (deleted
    on success, pruned) the result row does. `task` saves the lookup when the caller
    holds it (enqueue).
    """
    row = job or record
    if row is None:
        raise TaskResultDoesNotExist(result_id)
    payload, task = _payload_and_task(row, task, result_id)
    if job is not None and not runs_task(job["handler"], payload):
        raise TaskResultDoesNotExist(result_id)  # a forkq job, not a Django task
    if job is not None and record is not None and not same_enqueue(record, payload):
        record = None  # the result of an earlier job that had the same id
    status = _status(job, record)
    recorded = record or {}
    workers = json_list(recorded.get("workers"))
    errors = _recorded_errors(recorded)
    if job is not None:
        _add_unrecorded(job, status, workers, errors)
    started = [t for t in (recorded.get("attempted_at"), (job or {}).get("started_at")) if t]
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=result_id_of(int(row["id"] if job is not None else row["job_id"]), payload),
        status=status,
        enqueued_at=_time(row["enqueued_at"]),
        started_at=_time(recorded.get("started_at") or (job or {}).get("started_at")),
        last_attempted_at=_time(max(started, key=float)) if started else None,
        finished_at=_finished(job, recorded) if status in FINISHED else None,
        args=payload["args"],
        kwargs=payload["kwargs"],
        backend=payload["backend"],
        errors=errors,
        worker_ids=workers,
    )
    if status == SUCCESSFUL and recorded.get("return_value") is not None:
        object.__setattr__(result, "_return_value", json.loads(recorded["return_value"]))
    return result


def _payload_and_task(
    row: dict[str, Any], task: Task[Any, Any] | None, result_id: str
) -> tuple[dict[str, Any], Task[Any, Any]]:
    """The row's payload and the task it names (`task` when the caller holds it); a
    payload that is not forkq's, or a task this process does not define, is no result."""
    try:
        payload = decode_payload(row["payload"])
    except ValueError as exc:
        raise TaskResultDoesNotExist(f"{result_id}: {exc}") from exc
    task = task or task_of(payload)
    if task is None:
        raise TaskResultDoesNotExist(
            f"{result_id}: task {payload['task']!r} is not defined in this process"
        )
    return payload, task


def _status(job: dict[str, Any] | None, record: dict[str, Any] | None) -> TaskResultStatus:
    """The job row's status while it exists, else the result row's."""
    if job is not None:
        return JOB_STATUS.get(job["status"], READY)
    return RESULT_STATUS.get(record["status"] if record else "", FAILED)


def _recorded_errors(recorded: dict[str, Any]) -> list[TaskError]:
    """The errors the result row holds (its JSON list of exception paths and tracebacks)."""
    return [
        TaskError(exception_class_path=e["exception_class_path"], traceback=e["traceback"])
        for e in json_list(recorded.get("errors"))
    ]


def _add_unrecorded(
    job: dict[str, Any], status: TaskResultStatus, workers: list[Any], errors: list[TaskError]
) -> None:
    """What only the job row knows: the attempt running now, and an end the task never saw
    (a killed worker, a cancel), whose reason is forkq's last_error, unless the attempt
    history already gave it (django_attempts.py)."""
    attempts = int(job["attempts"])
    if status == RUNNING and job["locked_by"] and attempts > len(workers):
        workers.append(job["locked_by"])
    if job["status"] == "cancelled":
        if not errors or errors[-1].exception_class_path != class_path(TaskCancelled):
            errors.append(_error(TaskCancelled, job["last_error"] or "cancelled"))
    elif status == FAILED and attempts > len(workers) and job["last_error"]:
        errors.append(_error(TaskAttemptLost, job["last_error"]))


def _error(kind: type[Exception], text: str) -> TaskError:
    return TaskError(exception_class_path=class_path(kind), traceback=text)


def class_path(kind: type[Exception]) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _finished(job: dict[str, Any] | None, recorded: dict[str, Any]) -> datetime | None:
    return _time((job or {}).get("finished_at") or recorded.get("finished_at"))


def json_list(text: Any) -> list[Any]:
    """A JSON list column of forkq_results ([] when empty or missing)."""
    value = json.loads(text) if isinstance(text, str) and text else []
    return value if isinstance(value, list) else []


def _time(value: Any) -> datetime | None:
    """A stored time (epoch seconds) as Django hands times out: aware UTC with USE_TZ,
    naive in the current time zone without."""
    moment = utc(value)
    if moment is None or settings.USE_TZ:
        return moment
    naive: datetime = timezone.make_naive(moment)
    return naive
