"""Settling jobs whose holder is gone, and the cluster-wide chores.

Reaping expired leases, settling the jobs of processes that stopped beating, and
pruning finished jobs are done by one host at a time: whoever holds the
`forkq:chores` lease lock. Both the daemon's master and a lone `forkq work` run
them, so a crontab-only setup still recovers lost jobs.
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor import events, logs
from supervisor.config import Config
from supervisor.errors import LockLost
from supervisor.fate import failure_fate_for, max_attempts_for
from supervisor.kinds import GoneWorker, OnSuccess, Role
from supervisor.lock import Lock
from supervisor.models import JobRow, JobState
from supervisor.policy import truncate_error
from supervisor.store import Store
from supervisor.store.limits import fair
from supervisor.store.limits.upkeep import look_after_parked
from supervisor.store.results import attempt_end

CHORES_LOCK = "forkq:chores"


def fail_held_job(
    store: Store,
    row: JobRow,
    owner: str,
    error: str,
    *,
    only_expired: bool = False,
    ended: str = "died",
) -> bool:
    """Record a failed attempt for a job whose holder is gone: retry with backoff, or dead;
    the attempt goes into the job's history as `ended` (died, timeout, lease_expired)."""
    decision = failure_fate_for(row, error)
    if row.batch_id is not None:  # ending dead settles its batch when it is the last
        store.note_batch_job(row.id, row.batch_id)
    failed = store.fail(
        owner,
        row.id,
        truncate_error(decision.error),
        dead=decision.dead,
        delay=decision.delay,
        max_attempts=max_attempts_for(row),
        only_expired=only_expired,
        unique=row.unique_key is not None,
    )
    if failed and row.status is JobState.RUNNING:
        store.record_attempt(attempt_end(row, owner, ended, decision.error))
    return failed


def settle_owner(
    store: Store,
    owner: str,
    running_job: int | None,
    error: str,
    count_attempt: bool = True,
    *,
    count_held: bool = False,
    ended: str = "died",
) -> tuple[int, bool]:
    """Settle every job `owner` held after it died: how many, and whether `running_job`
    was among them (not when another worker holds it by now: the lease reaper's).

    The job it was running fails with `error` (attempt counted) when `count_attempt`,
    else returns to ready uncounted (a shutdown kill). Jobs it had claimed but not
    started go back to ready without counting an attempt, unless `count_held`: a worker
    that died between jobs before its second one may have died of one of them (a row its
    claim could not read, a value its first job returned that it could not write), so
    each attempt counts and a job that kills every worker that takes it ends dead after
    its attempts (decisions.counts_held).
    """
    rows = _finish_cancels(store, store.held_by(owner))
    running = any(r.id == running_job for r in rows)
    if count_held:
        held_error = f"{error} holding it between jobs, early in its life"
        return sum(int(fail_held_job(store, row, owner, held_error)) for row in rows), running
    unstarted = [r for r in rows if r.id != running_job]
    settled = store.release(owner, [r.id for r in unstarted], unique=_unique(unstarted))
    for row in rows:
        if row.id != running_job:
            continue
        if count_attempt:
            settled += int(fail_held_job(store, row, owner, error, ended=ended))
        else:
            settled += store.release(owner, [row.id], unique=_unique([row]))
    return settled, running


def reap_expired_leases(store: Store, limit: int = 500) -> int:
    """Expired leases: the holder died without anyone noticing; the attempt counts, unless
    the job was claimed and never started (settle_held_rows). A job that was being
    cancelled when its holder vanished ends cancelled."""
    reaped = 0
    for row in store.expired_leases(limit):
        if row.status == JobState.CANCELLING:
            reaped += int(store.finish_cancel(row.id))
        elif row.locked_until is None:  # no worker ever held it: a raw INSERT's row
            reaped += int(store.bury_unleased(row.id))
        elif row.locked_by:
            error = GoneWorker.LEASE_EXPIRED.said(
                f"holder {row.locked_by} stopped without finishing"
            )
            reaped += settle_held_rows(
                store, [row], row.locked_by, error, only_expired=True, ended="lease_expired"
            )
    return reaped


def settle_gone_worker(store: Store, owner: str, error: str, *, only_expired: bool = False) -> int:
    """A worker that vanished without a master to say which job it was running.

    `only_expired` leaves jobs whose lease is still live to their holder.
    """
    rows = store.held_by(owner)
    if not only_expired:  # a live lease's cancel is its holder's (or, once expired, the reaper's)
        rows = _finish_cancels(store, rows)
    held = [row for row in rows if row.status is JobState.RUNNING]
    return settle_held_rows(store, held, owner, error, only_expired=only_expired)


def settle_held_rows(
    store: Store,
    rows: list[JobRow],
    owner: str,
    error: str,
    *,
    only_expired: bool,
    ended: str = "died",
) -> int:
    """Settle running rows of a holder gone with no master to say what it ran.

    A job whose start was recorded may have run (or killed its worker), so its attempt
    counts; otherwise a job that kills its worker (OOM, a segfault) would never end dead.
    A job with no start recorded was claimed in a batch and waited its turn: it returns to
    ready with no attempt counted (issue 20). It may have started less than the hand-back
    grace before the holder died (or after its master died): then it runs again, as any
    job of a dead holder may, and that attempt is not charged.
    """
    unstarted = [row for row in rows if row.started_at is None]
    settled = store.release(
        owner, [r.id for r in unstarted], only_expired=only_expired, unique=_unique(unstarted)
    )
    return settled + sum(
        int(fail_held_job(store, row, owner, error, only_expired=only_expired, ended=ended))
        for row in rows
        if row.started_at is not None
    )


def _unique(rows: list[JobRow]) -> bool:
    """Whether a release of these rows may meet a unique key taken meanwhile (superseding)."""
    return any(row.unique_key is not None for row in rows)


def _finish_cancels(store: Store, rows: list[JobRow]) -> list[JobRow]:
    """A gone holder's `cancelling` jobs end cancelled now (they never run again); the
    others are returned, to settle as their holder's death says."""
    for row in rows:
        if row.status is JobState.CANCELLING:
            store.finish_cancel(row.id)
    return [row for row in rows if row.status is not JobState.CANCELLING]


def settle_stale_processes(store: Store, stale_after: float) -> int:
    """Processes that stopped beating: settle their jobs whose lease has run out, and
    drop the rows of those that hold nothing any more.

    A stale heartbeat does not prove death: a host cut off from the database still
    runs its jobs, and its master kills each one locally before its lease ends (at
    timeout + a few seconds; the lease is timeout + 30 s). So a live lease is never
    settled here: the job waits for its lease (reap_expired_leases takes it then), and
    there is never a second holder while the first may still run it. Guarantee 2.
    Until then its row stays, and `forkq status` shows it "stale since" (a master's row
    as long as one of its workers' does).
    """
    stale = store.stale_processes(stale_after)
    settled = 0
    holding: set[str] = set()  # workers with a live lease still, and their masters
    for process in (p for p in stale if p.role == Role.WORKER):
        settled += settle_gone_worker(
            store, process.name, GoneWorker.STOPPED_BEATING, only_expired=True
        )
        if store.held_by(process.name):
            holding.update({process.name, process.master or ""})
    store.remove_processes([p.name for p in stale if p.name not in holding])
    return settled


def prune_finished(store: Store, config: Config) -> int:
    """Delete kept done jobs, dead jobs and task results older than their pool's retention."""
    pruned = 0
    for pool in config.pools:
        if pool.on_success is OnSuccess.KEEP:
            pruned += store.purge("done", pool.retention, queue=pool.name)
        if pool.on_success is OnSuccess.ARCHIVE:
            pruned += store.purge_archive(pool.retention, queue=pool.name)
        pruned += store.purge("dead", pool.retention, queue=pool.name)
        pruned += store.purge("cancelled", pool.retention, queue=pool.name)
        pruned += store.purge_results(pool.result_retention, queue=pool.name)  # kept results
        pruned += store.purge_attempts(pool.retention, queue=pool.name)  # attempt history
    # the dashboard's charts keep a day
    return pruned + store.prune_throughput() + store.prune_handler_stats()


@dataclass
class ChoresReport:
    leader: bool = False
    reaped: int = 0
    settled: int = 0
    pruned: int = 0
    batches: int = 0
    swept: int = 0  # waiting jobs a missed release had left waiting (sweep_waiting)
    buried: int = 0  # jobs with no time to fall due at (a raw INSERT's, bury_untimed)


class Chores:
    """Holds the cluster chores lease across ticks; only the holder does the chores."""

    def __init__(self, store: Store, config: Config, owner: str | None = None) -> None:
        """`owner` names the lease holder across processes: the daemon's master forks a
        tick process per check, each renewing the lease the previous one took."""
        self.store = store
        self.config = config
        self.lock = Lock(store, CHORES_LOCK, config.supervisor.chores_lease, owner)
        self.lock.held = owner is not None  # renew first: a tick cannot know what the last one did
        self.sweep_from: int | None = None  # None: the sweep starts anywhere (random)
        self.log = logs.get()

    def lead(self) -> bool:
        """Keep or take the lease; False when another host holds it."""
        if self.lock.held:
            try:
                self.lock.renew()
                return True
            except LockLost:
                pass  # expired, or taken over by another host: try to take it
        return self.lock.acquire()

    def run(self) -> ChoresReport:
        report = ChoresReport(leader=self.lead())
        if not report.leader:
            return report
        report.reaped = reap_expired_leases(self.store)
        report.settled = settle_stale_processes(
            self.store, self.config.supervisor.process_stale_after
        )
        report.pruned = prune_finished(self.store, self.config)
        report.buried = sum(self.store.bury_untimed(pool.name) for pool in self.config.pools)
        # Jobs parked on a limit: none forgotten, also once no limit is configured (upkeep.py)
        look_after_parked(self.store, self.config)
        fair.prune_rounds(self.store, self.config)  # rows of rounds nobody serves
        report.batches = self.store.settle_open_batches()  # batches no finisher settled
        report.swept, self.sweep_from = self.store.sweep_waiting(self.sweep_from)
        if report.swept:
            self.log.warning(events.DEPENDENTS_SWEPT, settled=report.swept)
        if report.reaped or report.settled or report.pruned or report.batches or report.buried:
            self.log.info(
                events.CHORES_DONE,
                reaped=report.reaped,
                settled=report.settled,
                pruned=report.pruned,
                batches=report.batches,
                buried=report.buried,
            )
        return report

    def release(self) -> None:
        if self.lock.held:
            self.lock.release()
