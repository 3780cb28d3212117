"""Named meanings that were strings: a process's role, a pool's on-success mode, why a
child goes (and the metric label that says so), why the cluster settles a gone worker's
jobs. StrEnums: a log line, a row and a metric label read the same text as before, and
every use names its member, so `grep` finds them all here.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """A process row's role (forkq_processes.role) and the `role` of its log lines."""

    WORKER = "worker"
    MASTER = "master"


class OnSuccess(StrEnum):
    """A pool's on_success: what becomes of a job that succeeded."""

    DELETE = "delete"
    ARCHIVE = "archive"
    KEEP = "keep"


class ChildExit(StrEnum):
    """forkq_child_exits_total{reason}: recycled (max_jobs, max_lifetime, memory), retired
    by the master (pool shrinks, reload, shutdown), timeout (killed for a job past its
    timeout), cancelled (killed for its job's cancel), killed (SIGKILLed at shutdown or
    after ignoring SIGTERM when retired), crashed (a non-zero exit or a signal nobody sent
    on purpose: a broken module, a segfault, the OOM killer), exited (stopped for another
    reason, e.g. its master was gone)."""

    MAX_JOBS = "max_jobs"
    MAX_LIFETIME = "max_lifetime"
    MEMORY = "memory"
    RETIRED = "retired"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    KILLED = "killed"
    CRASHED = "crashed"
    EXITED = "exited"


class RetireReason(StrEnum):
    """Why a child goes without a kill: the master retired it, or it recycled itself (its
    status line `R <reason>`, a limit maybe after it: `max_jobs_per_child (500)`)."""

    RELOAD = "reload"
    SHUTDOWN = "shutdown"
    POOL_SHRINKS = "pool shrinks"
    POOL_REMOVED = "pool removed"
    MAX_JOBS = "max_jobs_per_child"
    MAX_LIFETIME = "max_child_lifetime"
    MEMORY = "memory_limit_mb"
    MASTER_GONE = "master gone"
    STOPPED = "stopped"

    def said(self, limit: object = None) -> str:
        """What the child says: the reason, and the limit it reached when there is one."""
        return str(self) if limit is None else f"{self} ({limit})"

    @classmethod
    def of(cls, said: str) -> RetireReason | None:
        """The reason a child's `said` text names; None for anything else."""
        for reason in cls:
            if said == reason or said.startswith(f"{reason} ("):
                return reason
        return None

    @property
    def exit(self) -> ChildExit:
        """The metric label of a child that went for this reason (and was not killed)."""
        return _EXITS.get(self, ChildExit.EXITED)


_EXITS = {
    RetireReason.MAX_JOBS: ChildExit.MAX_JOBS,
    RetireReason.MAX_LIFETIME: ChildExit.MAX_LIFETIME,
    RetireReason.MEMORY: ChildExit.MEMORY,
    RetireReason.RELOAD: ChildExit.RETIRED,
    RetireReason.SHUTDOWN: ChildExit.RETIRED,
    RetireReason.POOL_SHRINKS: ChildExit.RETIRED,
    RetireReason.POOL_REMOVED: ChildExit.RETIRED,
}


class GoneWorker(StrEnum):
    """Why the cluster settles the jobs of a worker no master speaks for (the job's error;
    a master's own reasons for a child it reaped are outcomes.SettleKind)."""

    FOUND_AT_BOOT = "worker gone (found at master start)"
    STOPPED_BEATING = "worker stopped beating"
    LEASE_EXPIRED = "lease expired"

    def said(self, detail: str) -> str:
        return f"{self} ({detail})"
