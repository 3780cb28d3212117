"""What operators ask of the store (the CLI, `Queue`'s operator calls): queue stats,
reading jobs, retry, cancel, purge, pause, and task results (supervisor.contrib.django).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from supervisor.jobref import MAX_JOB_ID
from supervisor.models import CancelResult, JobRow, JobState, QueueStats
from supervisor.store.core import PURGE_CHUNK, RESULTS_SCHEMA_VERSION, STATS_CAP, micros
from supervisor.store.dependencies import HAS_PARENTS, DependencyOps
from supervisor.store.results import ResultOps

NOT_STARTED = frozenset({JobState.WAITING, JobState.READY, JobState.SCHEDULED})
SORTED_MOST = 5_000  # jobs of one status `forkq jobs --status` sorts from its index range


class OperatorOps(DependencyOps, ResultOps):
    """Stats, job reads, retry / cancel / purge, pause and results."""

    # --- operators -----------------------------------------------------------------------

    def stats(
        self, cap: int | None = STATS_CAP, queues: Iterable[str] = (), minor_cap: int | None = None
    ) -> list[QueueStats]:
        """Per queue: ready, delayed, running, dead, done, cancelled, oldest ready age, paused.

        Never a scan of the jobs table, so a check tick costs the same at 10k rows and at
        5M: queue names come one index dive each (stats_first_queue, then each queue's
        `next_queue`), and each queue is one statement of index ranges that stop after
        `cap` + 1 entries. A count past `cap` is reported as `cap` and named in
        `QueueStats.capped`. `cap=None` counts exactly (stats_queue_exact), walking every
        index entry: for an operator who asks (`forkq status --exact`), never on a timer.

        `queues` are reported even when they hold no job (configured pools), as are
        paused queues. `minor_cap` (default: `cap`) caps the counts no alert rule reads
        (not due yet, scheduled, running, done): the check tick keeps them small.
        """
        query = "stats_queue" if cap is not None else "stats_queue_exact"
        minor = cap if minor_cap is None or cap is None else min(cap, minor_cap)
        # +1: a count past its cap shows
        limit = {} if cap is None or minor is None else {"limit": cap + 1, "minor_limit": minor + 1}
        found: dict[str, QueueStats] = {}
        name = self._rows("stats_first_queue")[0]["queue"]
        while name is not None and name not in found:  # a name seen twice: the walk is over
            row = self._rows(query, queue=name, **limit)[0]
            found[name] = _queue_stats(name, row, cap, minor)
            name = row["next_queue"]
        paused = self.paused_queues()
        for extra in (*paused, *queues):
            found.setdefault(extra, QueueStats(extra))
        return [replace(s, paused=s.queue in paused) for _, s in sorted(found.items())]

    def get_job(self, job_id: int) -> JobRow | None:
        rows = self._rows("get_job", id=job_id) or self._rows("get_archived_job", id=job_id)
        return JobRow.from_mapping(rows[0]) if rows else None

    def count_status(self, status: str, queue: str | None, cap: int) -> int:
        """Jobs of `status` (in `queue`), counted up to `cap` + 1 index entries."""
        query = "web_count_status" if queue is None else "web_count_status_queue"
        return int(self._rows(query, status=status, queue=queue, limit=cap + 1)[0]["n"])

    def list_jobs(
        self,
        status: str | None = None,
        queue: str | None = None,
        limit: int = 50,
        before: int | None = None,
    ) -> list[JobRow]:
        """Newest first (ids below `before`, the next page's). A status with few jobs
        (counted on the status index, as the dashboard does) is read from its range and
        sorted; else the primary key backwards, where they are many enough to come soon."""
        query = "list_jobs"
        if status is not None and self.count_status(status, queue, SORTED_MOST) <= SORTED_MOST:
            query = "list_jobs_status"
        highest = MAX_JOB_ID if before is None else before - 1  # ids are at most 2**63 - 1
        rows = self._rows(query, status=status, queue=queue, limit=limit, highest=highest)
        return [JobRow.from_mapping(r) for r in rows]

    def retry_jobs(self, ids: Sequence[int]) -> int:
        """Run jobs again (not running ones). From schema 14 a waiting job is left to its
        parents, and a cancelled one enqueued with parents is not retried (not_retried)."""
        if not ids:
            return 0
        query = "deps_retry_jobs" if self.has_deps_schema() else "retry_jobs"
        self.keep_earlier_run(ids)
        params = self._params(ids=self._ids(ids))

        def attempt() -> int:
            # Counted before the commit: a worker may claim a retried job the moment it is
            # committed, and a job counted once running would read as not retried.
            with self._tx():
                self._execute(query, params)
                return int(self._fetchall("ready_among", params)[0]["n"])

        return self._retrying(attempt)

    def not_retried(self, job_id: int) -> str:
        """Why retry_jobs left this job as it was, for the operator."""
        found = self.get_job(job_id)
        if found is None:
            return "no such job"
        if found.status in (JobState.RUNNING, JobState.CANCELLING):
            return "running (wait for it to finish)"
        if found.status == JobState.WAITING:
            return "waiting on its parents"
        rows = self._rows("deps_flags", id=job_id) if self.has_deps_schema() else []
        if found.status == JobState.CANCELLED and rows and int(rows[0]["deps"]) & HAS_PARENTS:
            return "cancelled with parents, which it can no longer wait on: enqueue it again"
        if found.unique_key is not None:
            holder = self._rows("key_holder", key=found.unique_key, id=job_id)
            if holder:
                return f"its unique key is held by job {holder[0]['id']}"
        return "archived"

    def retry_dead(self, queue: str | None = None) -> tuple[int, list[int]]:
        """Every dead job (of `queue`) ready again, a chunk per transaction: how many, and
        the ids retry_jobs left dead (a unique key another job holds: not_retried says)."""
        retried, left = 0, list[int]()
        while True:
            skip = self._ids(left or [0])  # ids start at 1; MySQL has no empty IN list
            rows = self._rows("dead_ids", queue=queue, skip=skip, limit=PURGE_CHUNK)
            if not rows:
                return retried, left
            ids = [int(r["id"]) for r in rows]
            self.retry_jobs(ids)
            still = self.still_dead(ids)
            retried, left = retried + len(ids) - len(still), left + still

    def still_dead(self, ids: Sequence[int]) -> list[int]:
        """Which of these jobs are dead: those a retry left so."""
        rows = self._rows("dead_among", ids=self._ids(ids)) if ids else []
        return sorted(int(r["id"]) for r in rows)

    def cancel_jobs(self, ids: Sequence[int], by: str) -> dict[int, CancelResult]:
        """Cancel jobs; {id: what happened} for every id asked for (SPEC: Job lifecycle).

        A waiting, ready or scheduled job ends `cancelled` at once; a running one becomes
        `cancelling`, and the master whose child runs it kills the child's process group
        and marks it `cancelled`. Neither is ever retried. `last_error` says "cancelled by
        <by>". Done, dead and already cancelled jobs are left as they are, and named.
        """
        wanted = list(dict.fromkeys(int(i) for i in ids))
        if not wanted:
            return {}
        params = {"ids": self._ids(wanted), "error": f"cancelled by {by}"}

        def attempt() -> dict[int, str]:
            with self._tx():
                found = {
                    int(r["id"]): str(r["status"])
                    for r in self._fetchall("cancel_select", self._params(**params))
                }
                if stopped := [i for i, status in found.items() if status in NOT_STARTED]:
                    self._execute("cancel_waiting", self._params(**params))
                    if self.has_deps_schema():  # their waiting children are settled too
                        self.settle_children(stopped, ended=JobState.CANCELLED)
                        self.forget_parents(stopped)
                if JobState.RUNNING in found.values():
                    self._execute("cancel_running", self._params(**params))
            return found

        found = self._retrying(attempt)
        missing = [i for i in wanted if i not in found]
        archived = (
            {int(r["id"]) for r in self._rows("archived_ids", ids=self._ids(missing))}
            if missing
            else set()
        )
        return {i: _cancel_result(found.get(i), i in archived) for i in wanted}

    def purge(self, status: str, older_than: float, queue: str | None = None) -> int:
        """Delete done or dead jobs finished more than `older_than` seconds ago, in chunks."""
        return self._in_chunks(
            "purge_finished", status=status, age_us=micros(older_than), queue=queue
        )

    def purge_archive(self, older_than: float, queue: str | None = None) -> int:
        return self._in_chunks("purge_archive", age_us=micros(older_than), queue=queue)

    def purge_results(self, older_than: float, queue: str) -> int:
        """Delete task results of `queue` finished more than `older_than` seconds ago, in
        chunks; a result whose job waits or runs again stays. Nothing before schema 6."""
        if not self._has_results_table():
            return 0
        return self._in_chunks("purge_results", age_us=micros(older_than), queue=queue)

    def _has_results_table(self) -> bool:
        return self.schema_at_least(RESULTS_SCHEMA_VERSION)

    # --- task results (supervisor.contrib.django) ----------------------------------------
    # On the application's own connection, as insert_on: inside its transaction (a job
    # enqueued and not yet committed is seen by the same connection), driver errors as
    # the driver raises them. Times come back as epoch seconds whatever the session's
    # time zone.

    def result_job_on(self, connection: Any, job_id: int) -> dict[str, Any] | None:
        """The job (or its archived row) as a task result reads it; None if neither."""
        rows = self._fetchall_on(connection, "result_job", {"id": job_id})
        return rows[0] if rows else None

    def result_on(self, connection: Any, job_id: int) -> dict[str, Any] | None:
        """The job's forkq_results row; None if no attempt was recorded (or it was pruned)."""
        rows = self._fetchall_on(connection, "get_result", {"id": job_id})
        return rows[0] if rows else None

    def attempts_on(self, connection: Any, job_id: int) -> list[dict[str, Any]]:
        """The job's recorded attempts (forkq_attempts, schema 12), oldest first."""
        return self._fetchall_on(connection, "job_attempts", {"id": job_id})

    def save_result_on(self, connection: Any, values: Mapping[str, Any]) -> None:
        """Write a job's whole result row: id, queue, status, payload, return_value,
        errors, workers (JSON text) and enqueued_at ... finished_at (epoch seconds)."""
        self._execute_on(connection, "save_result", dict(values))

    def set_paused(self, queue: str, paused: bool) -> None:
        self._run("set_paused", queue=queue, paused=1 if paused else 0)

    def set_progress(self, owner: str, job_id: int, progress: str) -> bool:
        """Record what a running job's handler reported; False if `owner` no longer holds it."""
        return bool(self._run("set_progress", owner=owner, id=job_id, progress=progress))

    def paused_queues(self) -> set[str]:
        return {r["queue"] for r in self._rows("paused_queues")}


def _queue_stats(
    queue: str, row: dict[str, Any], cap: int | None, minor: int | None = None
) -> QueueStats:
    """One stats_queue row: counts past `cap` become `cap` and are named in `capped`.

    `delayed` adds two ranges (scheduled rows, and ready rows not yet due); it is a
    lower bound when either is.
    """
    capped: set[str] = set()

    def count(name: str, *columns: str) -> int:
        total = 0
        for column in columns or (name,):
            value = int(row[column] or 0)
            limit = cap if column in ("ready", "dead") else minor
            if limit is not None and value > limit:
                value = limit
                capped.add(name)
            total += value
        return total

    return QueueStats(
        queue,
        ready=count("ready"),
        delayed=count("delayed", "ready_later", "scheduled"),
        running=count("running"),
        dead=count("dead"),
        done=count("done"),
        waiting=count("waiting") if "waiting" in row else 0,
        cancelled=count("cancelled"),
        oldest_ready_age=max(0.0, int(row["oldest_us"] or 0) / 1e6),
        capped=frozenset(capped),
    )


_CANCEL_RESULTS: dict[str, CancelResult] = {
    JobState.WAITING: CancelResult.CANCELLED,
    JobState.READY: CancelResult.CANCELLED,
    JobState.SCHEDULED: CancelResult.CANCELLED,
    JobState.RUNNING: CancelResult.CANCELLING,
    JobState.CANCELLING: CancelResult.CANCELLING,  # asked twice: still on its way out
    JobState.DONE: CancelResult.DONE,
    JobState.DEAD: CancelResult.DEAD,
    JobState.CANCELLED: CancelResult.ALREADY_CANCELLED,
}


def _cancel_result(status: str | None, archived: bool) -> CancelResult:
    if status is None:
        return CancelResult.DONE if archived else CancelResult.NOT_FOUND
    return _CANCEL_RESULTS.get(status, CancelResult.NOT_FOUND)
