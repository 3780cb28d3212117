"""What the daemons share through the database: process rows and heartbeats, the lease
locks, schedule slots (a slot enqueued once across hosts), alert state and throughput.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from supervisor.errors import DuplicateKey
from supervisor.models import LockRow, NewJob, ProcessRow, utc
from supervisor.store.core import NODE_SCHEMA_VERSION, PURGE_CHUNK, StoreCore, micros


class ClusterOps(StoreCore):
    """Processes, locks, schedule slots, alerts and throughput."""

    # --- processes -----------------------------------------------------------------------

    def register_process(
        self,
        name: str,
        host: str,
        pid: int,
        role: str,
        pool: str | None = None,
        master: str | None = None,
        node: str | None = None,
    ) -> None:
        """Insert the process's row, or beat it if it exists.

        `node` (proc.node_id()) says which machine and pid namespace the pid belongs to.
        On a schema older than NODE_SCHEMA_VERSION the row is written without it: the
        daemon still runs there, and a row without a node is never settled by a master's
        boot-time look at pids, only by the stale-heartbeat path.
        """
        query = "register_process" if self._has_node_column() else "register_process_no_node"
        self._run(
            query, name=name, host=host, pid=pid, role=role, pool=pool, master=master, node=node
        )

    def _has_node_column(self) -> bool:
        return self.schema_at_least(NODE_SCHEMA_VERSION)

    def beat(self, names: Sequence[str]) -> int:
        return self._run("beat_processes", names=self._ids(names)) if names else 0

    def remove_processes(self, names: Sequence[str]) -> int:
        return self._run("remove_processes", names=self._ids(names)) if names else 0

    def stale_processes(self, older_than: float) -> list[ProcessRow]:
        return [_process(r) for r in self._rows("stale_processes", age_us=micros(older_than))]

    def list_processes(self) -> list[ProcessRow]:
        return [_process(r) for r in self._rows("list_processes")]

    # --- locks ---------------------------------------------------------------------------

    def try_lock(self, name: str, owner: str, ttl: float) -> bool:
        """Take the lock if it is free or expired (seed 001's lock_by / expire_at design)."""
        params = {"name": name, "owner": owner, "ttl_us": micros(ttl)}
        if self._run("lock_take", **params) == 1:
            return True
        return self._run("lock_insert", **params) == 1

    def renew_lock(self, name: str, owner: str, ttl: float) -> bool:
        return self._run("lock_renew", name=name, owner=owner, ttl_us=micros(ttl)) == 1

    def release_lock(self, name: str, owner: str) -> bool:
        return self._run("lock_release", name=name, owner=owner) == 1

    def list_locks(self) -> list[tuple[LockRow, bool]]:
        out = []
        for r in self._rows("list_locks"):
            row = LockRow(
                r["name"], r["owner"], utc(r["acquired_at"]), utc(r["expires_at"]) or datetime.now()
            )
            out.append((row, bool(r["live"])))
        return out

    # --- schedules -----------------------------------------------------------------------

    def enqueue_slot(self, schedule: str, slot: float, job: NewJob) -> int | None:
        """Enqueue `job` for one due slot, once across all hosts: the slot row and the job
        commit together, and a slot another host already recorded returns None."""

        def attempt() -> int | None:
            try:
                with self._tx():
                    self._execute("insert_slot", self._params(schedule=schedule, slot=slot))
                    job_id = self._insert_job(self._params(**self.job_params(job)))
                    self._execute(
                        "set_slot_job", self._params(schedule=schedule, slot=slot, job_id=job_id)
                    )
                    return job_id
            except DuplicateKey:
                return None

        return self._retrying(attempt)

    def last_slot(self, schedule: str) -> float | None:
        value = self._rows("last_slot", schedule=schedule)[0]["slot"]
        return None if value is None else float(value)

    # --- alerts --------------------------------------------------------------------------

    def load_alerts(self) -> dict[str, dict[str, Any]]:
        out = {}
        for r in self._rows("load_alerts"):
            detail = json.loads(r["detail"]) if r["detail"] else {}
            out[r["alert_key"]] = {
                "state": r["state"],
                "detail": detail,
                "since": None if r["since"] is None else float(r["since"]),
                "notified_at": None if r["notified_at"] is None else float(r["notified_at"]),
            }
        return out

    def save_alert(
        self, key: str, state: str, detail: dict[str, Any], since: float, notified_at: float | None
    ) -> None:
        self._run(
            "save_alert",
            key=key,
            state=state,
            detail=json.dumps(detail, sort_keys=True),
            since=since,
            notified_at=notified_at,
        )

    # --- throughput ----------------------------------------------------------------------

    def record_throughput(
        self, minute: float, host: str, counts: Mapping[str, tuple[int, int]]
    ) -> int:
        """Add {queue: (done, failed)} to `minute` (epoch seconds) for this host; how many
        queues were written (in one transaction, sorted: two masters never deadlock)."""

        def attempt() -> int:
            with self._tx():
                for queue, (done, failed) in sorted(counts.items()):
                    params = dict(minute=minute, queue=queue, host=host, done=done, failed=failed)
                    self._execute("record_throughput", self._params(**params))
            return len(counts)

        return self._retrying(attempt) if counts else 0

    def prune_throughput(self, older_than: float = 86_400.0) -> int:
        return self._run("prune_throughput", age_us=micros(older_than), limit=PURGE_CHUNK)


def _process(row: dict[str, Any]) -> ProcessRow:
    return ProcessRow(
        name=row["name"],
        host=row["host"],
        pid=int(row["pid"]),
        role=row["role"],
        pool=row["pool"],
        master=row["master"],
        started_at=utc(row["started_at"]) or datetime.now(),
        heartbeat_at=utc(row["heartbeat_at"]) or datetime.now(),
        node=row.get("node"),
    )
