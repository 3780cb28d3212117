"""The claim → run → ack loop, shared by `forkq work` and the daemon's pool children.

One Worker owns one store connection and one lease owner name. It claims a batch,
runs the jobs one by one, and records outcomes. Successes are acknowledged in
batches (at the end of a claimed batch, or sooner when the buffer is old): if the
process dies before the ack, those jobs run again — at least once, never lost.
Failures are recorded at once. Anything waiting to be written survives a lost
connection and is written after the reconnect.

A worker claims only what it can start: one job, or — while its jobs are quick — a
batch that should take about 20 ms (sizing.py), and only where someone can take back what
it has not started when a job turns out slow (a daemon child: its master's hand-back,
daemon/handback.py). `forkq work` claims one job at a time. The first job of a batch
starts at once; the others are `claimed`, not `running`, until they start (SPEC).

One attempt (running the handler, what it came to) is attempt.py's; what becomes of
the job after it is fate.py's `fate_of_attempt`; the writing of outcomes is outbox.py's; the
soft timeout and a forked handler's copy are guards.py's.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from supervisor import events, logs, registry
from supervisor.config import Config, PoolConfig
from supervisor.errors import ConnectionLost, DatabaseError, TransientDatabaseError
from supervisor.fate import fate_of_attempt
from supervisor.models import JobRow
from supervisor.observe import metrics
from supervisor.outcomes import Outcome
from supervisor.store import Store
from supervisor.store import limits as flow
from supervisor.store.limits.claims import plan_for
from supervisor.work.attempt import log_finished, run_after_attempt, run_attempt
from supervisor.work.events import NoEvents, WorkerEvents
from supervisor.work.guards import disarm_soft_timeout
from supervisor.work.holds import RateHolds
from supervisor.work.keeping import Keeper, kept_first, wall_start
from supervisor.work.outbox import Outbox, Pending
from supervisor.work.sizing import ClaimSizing

LEASE_MARGIN = 30.0  # seconds a lease outlives the job's timeout: the master kills first
ACK_MAX_AGE = 0.2  # seconds a success may wait in the buffer before it is written
PAUSE_CACHE = 2.0  # seconds the paused-queue list is trusted
MAX_BACKOFF = 10.0  # seconds between reconnect attempts at most
BACKOFF_FLOOR = {True: 0.25, False: 0.02}  # the first back-off: lost connection, contention


@dataclass
class WorkerStats:
    jobs: int = 0  # jobs run by this worker (recycling, --max-jobs)


class Worker:
    def __init__(
        self,
        store: Store,
        config: Config,
        queues: Sequence[str],
        owner: str,
        events: WorkerEvents | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.queues = list(queues)
        self.owner = owner
        self.pid = os.getpid()  # a handler's forked copy is another pid: it never goes on
        self.events = events or NoEvents()
        self.log = logs.get()
        self.stopping = False
        self.retire_reason: str | None = None  # set after a job: finish up and exit
        self.retire_check: Callable[[], str | None] = lambda: None
        self.stats = WorkerStats()
        self.held: list[JobRow] = []  # claimed and not yet run
        # Outcomes waiting to be written (less those the master wrote in our stead).
        self.keeper = Keeper(store, config)  # keep_result and the attempt history
        self.outbox = Outbox(store, owner, self.log, self.events.written_elsewhere, self.keeper)
        self._lease_until = 0.0  # monotonic time the current leases run out
        self._paused: set[str] = set()
        self._paused_at = -PAUSE_CACHE
        self.backoff, self.lost = 0.0, False  # `safely`'s last back-off; for a lost connection?
        self._pools: dict[str, PoolConfig] = {}
        self.sizing = ClaimSizing()  # how many to claim (a recycled child's successor's)
        self._claim_unknown = False  # a claim lost its connection: it may have committed
        self.durations: list[float] = []  # each job's time in the batch running now
        self.after_attempt: list[Callable[[], None]] = []  # run once the handler returned
        self.max_jobs: int | None = None  # `forkq work --max-jobs`: claim no more than this
        # [limits]: None without any, and then claims are exactly as without the feature.
        self.limits = plan_for(config, _handler_queues())
        self.holds = RateHolds(self.limits)  # under a rate, a held job starts soon or goes back

    # --- settings per queue --------------------------------------------------------------

    def pool(self, queue: str) -> PoolConfig:
        """Settings of the queue's pool (looked up several times per job, so kept in a dict)."""
        pool = self._pools.get(queue)
        if pool is None:
            pool = self._pools[queue] = self.config.pool(queue) or PoolConfig(name=queue)
        return pool

    def job_timeout(self, row: JobRow) -> float:
        registered = registry.get(row.handler)
        return (registered.timeout if registered and registered.timeout else None) or self.pool(
            row.queue
        ).timeout

    # --- the loop ------------------------------------------------------------------------

    def work_once(self) -> int:
        """Claim one batch from the first queue that has work and run it; 0 when all are empty.

        Successes of the previous batch are recorded in the claim's own transaction.
        """
        self.outbox.flush_failures()
        if self._claim_unknown:
            self._release_lost_claim()
        if self.held:  # a batch interrupted by a lost connection: finish it first
            count = len(self.held)
            self._run_held()
            return count
        for queue in self.queues:
            if self.stopping or self.retire_reason:
                return 0
            if queue in self.paused():
                continue
            pool = self.pool(queue)
            self.outbox.forget_written_elsewhere()
            self.outbox.write_kept()  # kept values before the claim that acknowledges them
            done = self.pending.successes
            size, lease = self.claim_size(pool), pool.timeout + LEASE_MARGIN
            batch = self._claim(pool, done, queue, size, lease)
            if batch:
                self._lease_until = time.monotonic() + pool.timeout + LEASE_MARGIN
                self.held = list(batch)
                if len(batch) > 1:  # jobs wait behind the first: the master watches them
                    self.events.holding(more=len(batch) == size)
                self._run_held()
                return len(batch)
        self.flush()  # nothing claimed (paused, stopping): never go idle with unwritten outcomes
        self.sizing.after_idle()
        disarm_soft_timeout()  # the last job's timer (attempt.py leaves it): no alarm while idle
        return 0

    def _claim(
        self, pool: PoolConfig, done: dict[str, list[int]], queue: str, size: int, lease: float
    ) -> list[JobRow]:
        """Write `done` and claim up to `size` jobs in one transaction. The ledger knows a
        claim is under way until it knows what it took (a cancel waits for that)."""
        self.events.claiming()
        batch: list[JobRow] = []
        try:
            batch, written = flow.claim(
                self.store, done, queue, self.owner, size, lease,
                limits=self.limits or None, fair_share=pool.fair, weights=pool.weights,
            )  # fmt: skip
        except ConnectionLost:
            self._claim_unknown = True
            raise
        finally:
            self.events.claimed([row.id for row in batch])
            self.holds.claimed(batch)
        self.outbox.acknowledged(done, written)
        return batch

    def _release_lost_claim(self) -> None:
        """A claim whose connection died may have committed (the server or a Galera node
        went down before its answer came back): the jobs it took are ours in the table,
        unknown here. Return them to ready, uncounted, rather than let them wait out
        their lease; jobs we know of (held, outcomes not yet written) are left alone."""
        known = {row.id for row in self.held} | {f.job_id for f in self.pending.failures}
        known.update(i for ids in self.pending.successes.values() for i in ids)
        rows = [row for row in self.store.held_by(self.owner) if row.id not in known]
        if lost := [row.id for row in rows]:
            unique = any(row.unique_key is not None for row in rows)
            self.store.release(self.owner, lost, count_attempt=False, unique=unique)
            self.log.info(events.LOST_CLAIM_RELEASED, jobs=len(lost))
        self._claim_unknown = False

    def claim_size(self, pool: PoolConfig) -> int:
        """How many jobs to claim now: only what this worker can start.

        One job, unless someone can take back what we hold and have not started when a
        job turns out slow (the master's hand-back). Then slow start (sizing.py). Never
        more than may still run under `max_jobs` (the rest would be handed back). Under
        [limits] the claim takes fewer near a bound (buckets.decide).
        """
        if not self.events.can_hand_back:
            return 1
        size = self.sizing.size(pool.claim_batch)
        if self.max_jobs is not None:
            size = min(size, self.max_jobs - self.stats.jobs)
        return max(1, size)

    def _run_held(self) -> None:
        started, ran_before = time.monotonic(), self.stats.jobs
        self.durations = []
        self._run_batch()
        mean = (time.monotonic() - started) / max(1, self.stats.jobs - ran_before)
        typical = statistics.median_low(self.durations) if self.durations else mean
        self.sizing.after_batch(mean, typical)

    def _run_batch(self) -> None:
        while self.held and not self.stopping and not self.retire_reason:
            self._ensure_lease(self.held[0])  # (a round trip at times: before the look)
            if self.holds.start_by and (late := self.holds.late(self.held, time.monotonic())):
                self.release_held(late)
                continue
            # Popped before it runs: a retry after a lost write never runs it again.
            row = self.held.pop(0)
            self.run_job(row)
            self.retire_reason = self.retire_check()
            aged = self.pending.oldest and time.monotonic() - self.pending.oldest > ACK_MAX_AGE
            if aged or (self.pending.kept and kept_first(row, self.durations, self.held)):
                self.flush()
        # Successes wait for the next claim's transaction, unless this worker stops now.
        if self.held or self.stopping or self.retire_reason:
            self.flush()
        if self.held:  # stopping or retiring: hand back what we never started, uncounted
            self.release_held()

    def safely(self, step: Callable[[], int]) -> int:
        """Run a loop step; a lost database means back-off and retry, never a crash."""
        try:
            result = step()
        except (ConnectionLost, TransientDatabaseError) as exc:
            metrics.db_error()
            self.lost = lost = isinstance(exc, ConnectionLost)
            self.backoff = min(MAX_BACKOFF, max(BACKOFF_FLOOR[lost], self.backoff * 2))
            delay = self.backoff * random.uniform(0.8, 1.2)
            event = events.DB_UNREACHABLE if lost else events.DB_CONTENTION
            self.log.warning(event, error=str(exc), retry_in=round(delay, 3))
            self.sleep(delay)
            return 0
        if self.backoff and self.lost:
            self.log.info(events.DB_RECONNECTED)
        self.backoff = 0.0
        return result

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def paused(self) -> set[str]:
        now = time.monotonic()
        if now - self._paused_at >= PAUSE_CACHE:
            self._paused, self._paused_at = self.store.paused_queues(), now
        return self._paused

    # --- one job -------------------------------------------------------------------------

    @property
    def pending(self) -> Pending:
        """Outcomes not yet written (`forkq work --burst` stops only when there are none)."""
        return self.outbox.pending

    def run_job(self, row: JobRow) -> Outcome | None:
        """Run one claimed job and queue its outcome for writing; returns the outcome, or
        None when the master took the job back before it could start (it never runs here)."""
        started = time.monotonic()
        timeout = self.job_timeout(row)
        if not self.events.start(row, timeout):
            return None
        attempt = run_attempt(row, timeout, self)
        duration = time.monotonic() - started
        kept = None  # the return value as JSON, when the handler or pool keeps it
        if attempt.outcome is Outcome.DONE and self.keeper.keeps(row):
            attempt, kept = self.keeper.encoded(attempt, row)
        self.durations.append(duration)
        # The handler is done: its records (after_attempt) and its outcome are no longer the
        # job's time, so a slow or unreachable database never gets the child killed as overtime.
        self.events.job_ran(row)
        run_after_attempt(self.after_attempt, self.log)
        self.stats.jobs += 1
        # What happens to the job (a retry with no attempt left is dead), as the logs say.
        outcome, fate = fate_of_attempt(row, attempt)
        if row.batch_id is not None:  # its end settles the batch when it is the last (batches.py)
            self.store.note_batch_job(row.id, row.batch_id)
        try:
            if fate is not None:  # written at once, and into the job's attempt history
                self.outbox.failure(row, fate, outcome, wall_start(duration))
            elif outcome is Outcome.SNOOZED:
                self.outbox.snooze(row, attempt.error, attempt.delay or 0.0, wall_start(duration))
            elif kept is not None:
                self.outbox.kept(row, self.pool(row.queue).on_success, kept)  # with its value
            else:
                self.outbox.success(row.id, self.pool(row.queue).on_success)
                # The master may write it while we are busy (listed now, or with the
                # next held job's start when there is one).
                self.events.succeeded(row.id, bool(self.held))
        finally:  # written or still pending (the next flush retries it): the job has ended
            outcome = self.outbox.written_as(row.id) or outcome  # cancelled, snoozed too often
            if outcome is not Outcome.CANCELLED:  # a cancel's master counts and logs it
                metrics.job_finished(row.queue, row.handler, outcome, duration)  # no-op if off
            self.events.job_finished(row, outcome)
            if self.limits:  # its slot can go to a job parked on its limits
                self.limits.ended(row.handler, row.queue, row.limit_key)
        if outcome is not Outcome.CANCELLED:
            log_finished(self.log, row, attempt, outcome, duration)
        return outcome

    # --- writing outcomes, handing back, leases ------------------------------------------

    def flush(self) -> None:
        """Write pending outcomes; on a lost connection they stay pending for the next try."""
        self.outbox.flush()

    def release_held(self, late: Sequence[JobRow] = ()) -> None:
        """Hand back unstarted jobs, uncounted: all held, or the `late` ones (a rate lets
        them start no more: RateHolds). Those the master took back first are its own."""
        rows = list(late or self.held)
        gone = {row.id for row in rows}
        self.held = [row for row in self.held if row.id not in gone]
        ids = self.events.unhold([row.id for row in rows])
        unique = any(row.unique_key is not None for row in rows)
        try:
            self.store.release(self.owner, ids, count_attempt=False, unique=unique)
        except DatabaseError as exc:  # after a reconnect (else their leases expire)
            self._claim_unknown = self._claim_unknown or isinstance(exc, ConnectionLost)
            self.log.warning(events.RELEASE_FAILED, jobs=len(ids), error=str(exc))
        if late and ids:
            self.log.info(events.RATE_HOLD_RELEASED, jobs=len(ids))

    def record_progress(self, job_id: int, progress: str) -> bool:
        return self.store.set_progress(self.owner, job_id, progress)

    def extend_lease(self, ids: Sequence[int]) -> bool:
        lease = max(self.pool(q).timeout for q in self.queues) + LEASE_MARGIN
        return self.store.extend_leases(self.owner, ids, lease) == len(ids)

    def _ensure_lease(self, row: JobRow) -> None:
        """Before a job starts, make sure every held lease outlives its timeout.

        Only when less than the timeout plus half the margin is left: a fresh lease has
        the whole margin, so a batch of short jobs never pays for an extension.
        """
        timeout = self.job_timeout(row)
        if self._lease_until - time.monotonic() < timeout + LEASE_MARGIN / 2:
            self.store.extend_leases(self.owner, [r.id for r in self.held], timeout + LEASE_MARGIN)
            self._lease_until = time.monotonic() + timeout + LEASE_MARGIN

    def shutdown(self) -> None:
        """Write what is pending and hand back unstarted jobs; best effort."""
        try:
            self.flush()
        except DatabaseError as exc:
            self.log.warning(events.FLUSH_FAILED, error=str(exc))
        if self.held:
            self.release_held()


def _handler_queues() -> dict[str, str]:
    """Each registered handler's queue: where [limits] that name handlers apply first."""
    return {name: h.queue for name in registry.names() if (h := registry.get(name)) is not None}
