"""The dashboard's reads and bulk actions (supervisor/web): Store's ViewOps."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from supervisor.models import JobListing, Throughput
from supervisor.store.core import StoreCore, micros


class ViewOps(StoreCore):
    """What the dashboard reads, and its bulk actions on dead jobs."""

    # --- web: the dashboard's reads and bulk actions (supervisor/web) ---------------------
    # Every read is a primary-key dive or an index range that stops at a LIMIT.

    def throughput(self, seconds: float) -> list[Throughput]:
        """Per minute and queue, summed over hosts, for the last `seconds` (database clock)."""
        return [
            Throughput(float(r["minute"]), r["queue"], int(r["done"]), int(r["failed"]))
            for r in self._rows("web_throughput", age_us=micros(seconds))
        ]

    def job_id_range(self) -> tuple[int, int] | None:
        """The lowest and highest job ids, None when there is no job."""
        row = self._rows("web_id_range")[0]
        return None if row["last"] is None else (int(row["first"]), int(row["last"]))

    def jobs_window(
        self,
        before: int,
        floor: int,
        limit: int,
        *,
        queue: str | None = None,
        status: str | None = None,
        handler: str | None = None,
    ) -> list[JobListing]:
        """Jobs with floor <= id < before that match, newest first: reads at most
        before - floor rows of the primary key, however few match."""
        rows = self._rows(
            "web_jobs_window",
            before=before,
            floor=floor,
            limit=limit,
            queue=queue,
            status=status,
            handler=handler,
        )
        return [JobListing.from_mapping(r) for r in rows]

    def search_jobs(
        self, before: int, floor: int, limit: int, terms: Mapping[str, str | None]
    ) -> list[JobListing]:
        """Jobs with floor <= id < before matching every search term, newest first: reads
        at most before - floor rows of the primary key. `terms`: queue, status, handler,
        error (a lowercased LIKE pattern, `!` its escape), tag, path (a JSON path) and value."""
        names = ("queue", "status", "handler", "error", "tag", "path", "value")
        given = {name: terms.get(name) for name in names}
        rows = self._rows("web_jobs_search", before=before, floor=floor, limit=limit, **given)
        return [JobListing.from_mapping(r) for r in rows]

    def jobs_by_status(
        self, status: str, queue: str | None, handler: str | None, before: int, limit: int
    ) -> list[JobListing]:
        """Newest first from the status index: for a status with few jobs (count_status)."""
        query = "web_jobs_status" if queue is None else "web_jobs_status_queue"
        rows = self._rows(
            query, status=status, queue=queue, handler=handler, before=before, limit=limit
        )
        return [JobListing.from_mapping(r) for r in rows]

    def job_id_by_key(self, key: str) -> int | None:
        rows = self._rows("web_job_by_key", key=key)
        return int(rows[0]["id"]) if rows else None

    def job_listing(self, job_id: int) -> JobListing | None:
        """Every column of one job, the archive's too, its lease holder's host and pid."""
        rows, archived = self._rows("get_job", id=job_id), False
        if not rows:
            rows, archived = self._rows("get_archived_job", id=job_id), True
        if not rows:
            return None
        row = dict(rows[0])
        holder = self._rows("web_process", name=row["locked_by"]) if row["locked_by"] else []
        if holder:
            row.update(host=holder[0]["host"], pid=holder[0]["pid"])
        return JobListing.from_mapping(row, archived=archived)

    def running_jobs(self, queue: str | None = None, limit: int = 500) -> list[JobListing]:
        rows = self._rows("web_running", queue=queue, limit=limit)
        return [JobListing.from_mapping(r) for r in rows]

    def discard_dead_jobs(self, ids: Sequence[int]) -> int:
        """Delete these jobs if they are dead (a stale page never deletes another kind)."""
        return self._run("web_discard", ids=self._ids(ids)) if ids else 0

    def discard_queue_dead(self, queue: str) -> int:
        """Delete every dead job of `queue`, a chunk per transaction."""
        return self._in_chunks("web_discard_dead", queue=queue)

    def schedule_slots(self, schedule: str, limit: int = 10) -> list[tuple[float, int | None]]:
        """(slot, job id) of a schedule's latest enqueued slots, newest first."""
        return [
            (float(r["slot"]), None if r["job_id"] is None else int(r["job_id"]))
            for r in self._rows("web_slots", schedule=schedule, limit=limit)
        ]
