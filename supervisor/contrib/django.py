"""A backend for Django's Tasks framework: `@task` functions run on forkq's pools.

    TASKS = {
        "default": {
            "BACKEND": "supervisor.contrib.django.ForkqBackend",
            "QUEUES": ["default", "mail"],           # forkq queues (each needs a pool)
            "OPTIONS": {"database": "default", "max_attempts": 5},
        }
    }

Enqueueing writes one forkq_jobs row on Django's own connection to `database` (the
alias whose database holds forkq's tables), so inside `transaction.atomic()` the job
exists if and only if the transaction commits; outside one Django autocommits and the
job exists at once. Queues spread over several databases (forkq's `[databases.NAME]`):
`"queue_databases": {"reports": "reports_db"}` writes the jobs of queue "reports" on the
alias "reports_db" (inside `transaction.atomic(using="reports_db")`), and their results
are read and written there. The job's handler is the task's path (`shop.tasks.send_invoice`).
A TaskResult's id is the forkq job id and a random token (`42-9f0c...`): see
django_results.result_id_of. Django's priority (-100 to
100, higher first) is forkq's priority unchanged, `run_after` is the job's run_at and
`queue_name` its queue.

The daemon side: `handlers = ["supervisor.contrib.django"]` in forkq's config. Imported
by `forkq run` (a process where Django is not set up yet), this module sets Django up
once, before the master forks, and registers the path of every task it finds as a forkq
handler, and "django.task" for older rows (see django_worker.py). Imported by a Django process (to build this backend),
it does neither.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import connections, transaction
from django.db.transaction import TransactionManagementError
from django.utils import timezone

from . import django_results as results
from .django_attempts import misses_attempts, with_lost_attempts
from .django_compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    task_enqueued,
)
from .django_store import usable_connection

MAX_QUEUE_NAME = 64  # forkq_jobs.queue
MAX_ID = 2**63 - 1  # forkq_jobs.id is a BIGINT
OPTIONS = frozenset({"database", "max_attempts", "queue_databases"})


class ForkqBackend(BaseTaskBackend):
    """Django Tasks on forkq: enqueue in the caller's transaction, results kept for the
    pool's retention, retries with forkq's backoff."""

    supports_defer = True  # run_after
    supports_async_task = True  # a coroutine task runs to completion in the worker
    supports_get_result = True  # from any process: the rows are in the database
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - OPTIONS
        if unknown:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]['OPTIONS']: unknown {sorted(unknown)}; known: {sorted(OPTIONS)}"
            )
        self.database: str = self.options.get("database", "default")
        self.max_attempts: int | None = self.options.get("max_attempts")
        if not isinstance(self.database, str) or not self.database:
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]: OPTIONS 'database' names a DATABASES alias"
            )
        routes = self.options.get("queue_databases") or {}
        if not isinstance(routes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in routes.items()
        ):
            raise InvalidTaskBackend(
                f"TASKS[{alias!r}]: OPTIONS 'queue_databases' maps queue names to DATABASES aliases"
            )
        self.queue_databases: dict[str, str] = dict(routes)
        attempts = self.max_attempts
        if attempts is not None and (
            isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1
        ):
            raise InvalidTaskBackend(f"TASKS[{alias!r}]: OPTIONS 'max_attempts' is an integer >= 1")

    # --- the contract ------------------------------------------------------------------------

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        if len(task.queue_name) > MAX_QUEUE_NAME:
            raise InvalidTask(f"Queue names have at most {MAX_QUEUE_NAME} characters on forkq.")
        results.remember(task)  # the tasks a row may name: see django_results.py

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        """One forkq_jobs row on Django's connection, in its transaction if one is open."""
        self.validate_task(task)
        # Django's own check of the arguments (TypeError "Unsupported type ...").
        call: TaskResult[Any] = TaskResult(
            task=task,
            id="",
            status=results.READY,
            enqueued_at=None,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        run_at = task.run_after
        if run_at is not None and timezone.is_naive(run_at):  # USE_TZ = False: local time
            run_at = timezone.make_aware(run_at)
        database = self.database_for(task.queue_name)
        connection = self._connection(database)
        queue, nudger = results.queue_for(connection)
        with (
            transaction.mark_for_rollback_on_error(using=database),
            connection.wrap_database_errors,
        ):
            job_id = queue.enqueue(
                results.handler_for(task),
                results.encode_payload(task, call.args, call.kwargs),
                queue=task.queue_name,
                run_at=run_at,
                priority=task.priority,
                max_attempts=self.max_attempts,
                connection=connection.connection,
            )
            row = queue.store.result_job_on(connection.connection, job_id)
        if nudger is not None and (run_at is None or run_at <= timezone.now()):
            # Local daemons start it at once, but only once it is committed.
            transaction.on_commit(partial(nudger.nudge, [task.queue_name]), database)
        result = results.build_result(row, None, task=task, result_id=str(job_id))
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The task's state now: its job row while it exists, its result row after that.

        Read on Django's connection, so inside a transaction it sees that transaction's
        own uncommitted jobs. With `queue_databases` each database is asked in turn: ids
        are per database, the id's random token tells which enqueue it was.

        A database whose atomic block is broken (an error caught inside it) is not asked:
        Django runs no query there until the block ends, and the others are still asked,
        as Django's ORM would query them. When the task may be in the broken one (no other
        holds it; for a plain job id of older rows, one asked before it), that is a
        TransactionManagementError naming the database, never TaskResultDoesNotExist."""
        job_id = _job_id(result_id)
        missing = TaskResultDoesNotExist(result_id)
        broken: TransactionManagementError | None = None
        for database in self.databases():
            try:
                connection = self._connection(database)
            except TransactionManagementError as exc:
                broken = broken or _unreadable(result_id, database, exc)
                continue
            try:
                result = _result_on(connection, job_id, result_id)
            except TaskResultDoesNotExist as exc:  # no Django task here: ask the next
                missing = exc
                continue
            if result is None:
                continue
            if broken is not None and "-" not in str(result_id):  # no token: the first one wins
                raise broken
            return result
        raise broken or missing

    def database_for(self, queue: str) -> str:
        """The DATABASES alias holding `queue`'s jobs."""
        return self.queue_databases.get(queue, self.database)

    def databases(self) -> list[str]:
        """Every alias this backend writes to, `database` first."""
        return list(dict.fromkeys([self.database, *self.queue_databases.values()]))

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        yield from super().check(**kwargs)
        for database in self.databases():
            if database not in settings.DATABASES:
                option = "database" if database == self.database else "queue_databases"
                yield checks.Error(
                    f"TASKS[{self.alias!r}]: OPTIONS {option!r} names {database!r},"
                    " which is not in DATABASES",
                    id="forkq.E001",
                )
                continue
            try:
                results.database_url(connections[database])
            except Exception as exc:
                yield checks.Error(f"TASKS[{self.alias!r}]: {exc}", id="forkq.E002")

    # --- plumbing ------------------------------------------------------------------------------

    def _connection(self, database: str) -> Any:
        """Django's connection, open and usable (not in a transaction marked for rollback)."""
        connection = connections[database]
        usable_connection(connection)
        connection.validate_no_broken_transaction()
        return connection


def _result_on(connection: Any, job_id: int, result_id: str) -> TaskResult[Any] | None:
    """The task `result_id` names in the connection's database; None when none is there
    (not the job id of another enqueue either: a reused id); TaskResultDoesNotExist when
    the row there is not a Django task this process knows."""
    store = results.store_for(connection)
    with connection.wrap_database_errors:
        job = store.result_job_on(connection.connection, job_id)
        record = store.result_on(connection.connection, job_id)
        if job is not None and misses_attempts(job, record):
            history = store.attempts_on(connection.connection, job_id)
            record = with_lost_attempts(job, record, history)
    if job is None and record is None:
        return None
    result = results.build_result(job, record, result_id=result_id)
    return result if result.id == result_id else None


def _unreadable(
    result_id: str, database: str, exc: TransactionManagementError
) -> TransactionManagementError:
    """Django's refusal to query a broken transaction, saying which database and why."""
    error = TransactionManagementError(
        f"Task result {result_id!r} may be in database {database!r}, whose 'atomic' block"
        f" is broken: {exc}"
    )
    error.__cause__ = exc
    return error


def _job_id(result_id: str) -> int:
    """The job id of a TaskResult id (`JOBID-TOKEN`, or `JOBID` of older rows);
    TaskResultDoesNotExist for anything that is not one."""
    text = str(result_id).partition("-")[0]
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= MAX_ID:
        raise TaskResultDoesNotExist(result_id)
    return int(text)


def _django_running() -> bool:
    """Whether this process runs Django already (a web app, a management command, a test):
    then the backend is all it wants from this module."""
    return bool(apps.ready or apps.loading)


def _daemon_side() -> None:
    """`handlers = ["supervisor.contrib.django"]`: set Django up and register the handler.
    Again after a reload (HUP) of this module, where Django is set up already."""
    from . import django_worker

    if django_worker.booted() or not _django_running():
        django_worker.boot()


_daemon_side()
