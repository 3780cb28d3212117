"""A pool child: forked by the master, it claims and runs jobs of one queue.

Fork hazards handled here: the child first resets every signal handler it
inherited, reseeds its RNG, puts itself in its own process group (so the master
can kill handler subprocesses with it), asks the kernel for SIGTERM when the master
dies, becomes the subreaper of whatever its jobs start (descendants.py: a job's
leftover processes are killed when it ends), and only then opens its own database
connection. Its outermost frame ends in `os._exit`, so it never unwinds into the
master's stack.

Talk with the master is two pipes: status (child → master, short lines: idle, retiring,
"I hold jobs behind the first", "... and my claim was full: wake a sibling") and wake
(master → child: a byte when its queue has due jobs; EOF when the master is gone).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import select
import signal
import time
from dataclasses import dataclass, replace
from functools import partial
from types import FrameType

from supervisor import events, logs
from supervisor.config import Config, PoolConfig
from supervisor.daemon.decisions import recycle_after
from supervisor.daemon.ledger import Ledger
from supervisor.daemon.orphan import start_guard
from supervisor.daemon.scoreboard import Scoreboard
from supervisor.errors import DatabaseError
from supervisor.escaping import for_terminal
from supervisor.kinds import RetireReason, Role
from supervisor.models import JobRow
from supervisor.observe import metrics
from supervisor.outcomes import Outcome
from supervisor.proc import die_with_parent, hostname, node_id, set_escaped_title, set_title
from supervisor.store import Store, open_store
from supervisor.timing import FAILED_OUTCOMES, SEND_EVERY, Tally
from supervisor.work.descendants import become_subreaper, kill_leftovers
from supervisor.work.sizing import ClaimSizing
from supervisor.work.worker import BACKOFF_FLOOR, LEASE_MARGIN, MAX_BACKOFF, Worker

IDLE_RECHECK = 120.0  # seconds an idle child waits for the master's wake-up before it looks itself
LIFETIME_JITTER = 0.1  # ±10% so children started together do not all retire together
# Seconds between two reads of the RSS while held jobs wait: a run of quick jobs pays one
# read, not one each. The last job of a batch, and every wake-up, read it as before.
RSS_EVERY = 0.05
SHOWN_MOST = 1024  # handler names whose escaped form a child keeps


@dataclass(frozen=True)
class ChildSpec:
    pool: PoolConfig
    slot: int  # 1-based number within the pool, for titles
    name: str  # host:pid:token, the lease owner
    master_pid: int
    status_fd: int  # write end
    wake_fd: int  # read end
    scoreboard: Scoreboard
    master_name: str
    ledger: Ledger  # what it holds unstarted and its unwritten successes, shared with the master
    sizing: ClaimSizing | None = None  # its pool's last retired child's: where to go on from
    schema: int | None = None  # the schema version its master checked as the latest, if it did


class PipeEvents:
    """Reports to the master and keeps the process title current.

    Job starts and ends go to the shared scoreboard and the ledger (no master wake-up
    per job); only idle and retiring go down the status pipe. The master may take back
    the jobs the ledger lists (daemon/handback.py): a job starts only if it is still ours.
    """

    can_hand_back = True

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.label = f"forkq: {spec.pool.name} worker {spec.slot}"
        self.shown_label = for_terminal(self.label)
        self.shown_handlers: dict[str, str] = {}  # handler: its escaped name, for the title
        self.jobs = 0
        self.failed = 0
        self.tally = Tally()  # per-handler timing, sent to the master at most once a second
        self.started = self.ran = self.send_at = 0.0
        self.unlisted = 0  # a success of the batch, listed in the ledger at the next start

    def send(self, line: str) -> None:
        timing = self.tally.encode()  # what it gathered rides along (the master adds it up)
        if timing:
            line = f"T {timing}\n{line}" if line else f"T {timing}"
            self.send_at = time.monotonic() + SEND_EVERY
        if not line:
            return
        with contextlib.suppress(OSError):  # the master is gone; the parent-death check ends us
            os.write(self.spec.status_fd, (line + "\n").encode())

    def claiming(self) -> None:
        self.spec.ledger.claiming()

    def claimed(self, ids: list[int]) -> None:
        self.spec.ledger.hold(ids)

    def unhold(self, ids: list[int]) -> list[int]:
        return self.spec.ledger.unhold(ids)

    def start(self, job: JobRow, timeout: float) -> bool:
        board = self.spec.scoreboard
        success, self.unlisted = self.unlisted, 0
        if not self.spec.ledger.start(
            job.id, lambda: board.write(job.id, timeout, self.jobs, self.failed), success
        ):
            return False  # the master handed it back to the queue while we were busy
        shown = self.shown_handlers.get(job.handler) or self._shown(job.handler)
        set_escaped_title(f"{self.shown_label} job {job.id} ({shown})")
        self.started = time.monotonic()
        return True

    def _shown(self, handler: str) -> str:
        """The handler's name as a title shows it (escaped once, not once a job)."""
        if len(self.shown_handlers) >= SHOWN_MOST:  # rows are not trusted: keep it bounded
            self.shown_handlers.clear()
        shown = self.shown_handlers[handler] = for_terminal(handler)
        return shown

    def succeeded(self, job_id: int, more: bool = False) -> None:
        if more:  # listed with the next job's start, under the same lock
            self.unlisted = job_id
        else:
            self.spec.ledger.succeeded(job_id)

    def written_elsewhere(self) -> list[int]:
        self.unlisted = 0  # the child writes it now: the master must not
        return self.spec.ledger.written_elsewhere()

    def holding(self, more: bool) -> None:
        # A wake-up for the master, which watches the first job for the hand-back grace and
        # wakes an idle sibling for the rest: only worth a system call and a master loop
        # turn when a sibling is idle (a sibling going idle later wakes the master itself).
        if self.spec.ledger.idle_siblings():
            self.send("M" if more else "H")

    def job_ran(self, job: JobRow) -> None:
        # Still this job's (a death now settles it, attempt counted), but no deadline:
        # its outcome is being written, and a silent database is no overtime.
        self.spec.scoreboard.write(job.id, math.inf, self.jobs, self.failed)
        self.ran = time.monotonic()

    def job_finished(self, job: JobRow, outcome: Outcome) -> None:
        self.jobs += 1
        self.failed += outcome is not Outcome.DONE
        self.spec.scoreboard.write(None, 0.0, self.jobs, self.failed)
        kill_leftovers(job.id)  # a job owns its descendants: they end with it
        self.tally.add(job.handler, self.ran - self.started, outcome in FAILED_OUTCOMES)
        if self.ran >= self.send_at:
            self.send("")  # the timing line alone

    def idle(self) -> None:
        set_title(f"{self.label} idle")
        self.send("I")


def child_main(config: Config, spec: ChildSpec) -> int:
    """Run until told to stop, recycled, or orphaned. Returns the exit code."""
    os.setpgid(0, 0)
    die_with_parent(signal.SIGTERM)
    become_subreaper()  # orphans of a job's processes come to us, not to init
    if os.getppid() != spec.master_pid:
        return 0  # the master died before we asked to follow it
    random.seed()
    logs.bind(role=Role.WORKER, pool=spec.pool.name, pid=os.getpid(), slot=spec.slot)
    metrics.worker_started()
    events = PipeEvents(spec)
    set_title(f"{events.label} starting")
    store = open_store(config.database, session_timeout=config.supervisor.db_session_timeout)
    store.schema_checked = spec.schema  # the version its master checked: not asked again
    worker = PoolWorker(store, config, [spec.pool.name], spec.name, events)
    worker.wake_fd = spec.wake_fd
    if spec.sizing is not None:  # a recycled child's place: go on as it would have
        worker.sizing = replace(spec.sizing)
    # Register before the first claim: if the master dies before it registers us, our
    # jobs are still found by the process-table sweeps, not only by lease expiry.
    worker.safely(partial(_register, store, spec))

    def stop(signum: int, frame: FrameType | None) -> None:
        worker.stopping = True  # finish the current job, hand back the rest, exit

    start_guard(spec.wake_fd, spec.scoreboard, partial(setattr, worker, "stopping", True))
    # A signal must also end an idle wait: select() is resumed after a handler
    # (PEP 475), so the wakeup fd makes it readable instead.
    signal_r, signal_w = os.pipe()
    os.set_blocking(signal_w, False)
    signal.set_wakeup_fd(signal_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the master decides what Ctrl-C means
    reason = _loop(worker, spec, events, signal_r)
    worker.shutdown()
    # Said first: the master no longer counts on us (a wake-up meant for an idle sibling)
    events.send(f"R {worker.sizing.said()} {reason}")
    _write_what_is_left(worker, spec, signal_r)
    store.close()
    return 0


class PoolWorker(Worker):
    """A pool child's worker: a back-off after a lost database ends early when the master
    says it answers again (a byte on the wake pipe), so the successes it holds are written
    before their leases run out (else they would run again), and it claims at once."""

    wake_fd = -1

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and (left := deadline - time.monotonic()) > 0:
            if self.wake_fd < 0:
                time.sleep(min(0.1, left))
            elif select.select([self.wake_fd], [], [], min(0.1, left))[0]:
                if os.read(self.wake_fd, 4096):
                    # A try that fails now waits a short back-off, not the next doubling
                    # (not 0: a try that works still says it reconnected)
                    self.backoff = min(self.backoff, BACKOFF_FLOOR[self.lost])
                    return
                self.wake_fd = -1  # EOF: the master is gone (the orphan guard stops us)


def _loop(worker: Worker, spec: ChildSpec, events: PipeEvents, signal_fd: int) -> str:
    recycler = Recycler(spec.pool, worker)
    worker.retire_check = recycler
    worker.max_jobs = recycler.max_jobs  # never claim more than it may still run
    events.idle()
    while not worker.stopping and not worker.retire_reason:
        done = worker.safely(worker.work_once)
        if done or worker.backoff or worker.stopping or worker.retire_reason:
            continue
        events.idle()
        wait = min(IDLE_RECHECK, max(0.05, recycler.retire_at - time.monotonic()))
        if not _wait_for_wake(spec.wake_fd, signal_fd, wait):
            return RetireReason.MASTER_GONE
        worker.retire_reason = worker.retire_check()  # an idle child ages too
    return worker.retire_reason or RetireReason.STOPPED


def _write_what_is_left(worker: Worker, spec: ChildSpec, signal_fd: int) -> None:
    """Outcomes the last write could not take (the database away) are tried again, a
    back-off apart (the master's wake-up when it answers cuts one short), for as long as
    a lease outlives its job, or until the master kills us at a stop's deadline: gone
    with us, those successes would run again. A stop during a short outage loses none."""
    end, backoff, master = time.monotonic() + LEASE_MARGIN, 0.25, True
    while worker.pending and time.monotonic() < end:
        if master:
            master = _wait_for_wake(spec.wake_fd, signal_fd, backoff)
        else:  # the master is gone (EOF on the wake pipe): the orphan guard may stop us
            time.sleep(backoff)
        backoff = min(MAX_BACKOFF, backoff * 2)
        with contextlib.suppress(DatabaseError):
            worker.flush()
    if worker.pending:
        worker.log.warning(events.FLUSH_FAILED, note="given up: the database stayed away")


def _register(store: Store, spec: ChildSpec) -> int:
    store.register_process(
        spec.name, hostname(), os.getpid(), Role.WORKER, spec.pool.name, spec.master_name, node_id()
    )
    return 0


class Recycler:
    """After each job: has this child done enough, lived enough, or grown too big?"""

    def __init__(self, pool: PoolConfig, worker: Worker) -> None:
        self.pool = pool
        self.worker = worker
        jitter = random.uniform(1 - LIFETIME_JITTER, 1 + LIFETIME_JITTER)
        self.retire_at = time.monotonic() + pool.max_child_lifetime * jitter
        self.max_jobs = recycle_after(pool.max_jobs_per_child, random.random())
        self.memory_limit = pool.memory_limit_mb * 1024 * 1024
        self.rss = ResidentSize()
        self.rss_read_at = -RSS_EVERY  # monotonic time of the last read

    def __call__(self) -> str | None:
        if self.worker.stats.jobs >= self.max_jobs:
            return RetireReason.MAX_JOBS.said(self.pool.max_jobs_per_child)
        now = time.monotonic()
        if now >= self.retire_at:
            return RetireReason.MAX_LIFETIME.said()
        if not self.worker.held or now - self.rss_read_at >= RSS_EVERY:
            self.rss_read_at = now
            if self.rss() > self.memory_limit:
                return RetireReason.MEMORY.said(self.pool.memory_limit_mb)
        return None


class ResidentSize:
    """This process's RSS in bytes, read after jobs (RSS_EVERY), so it must be cheap.

    On Linux one pread of /proc/self/statm on a descriptor opened once (about a
    microsecond; psutil opens and parses a file each call); psutil elsewhere.
    """

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        try:
            self.fd: int | None = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self.fd = None

    def __call__(self) -> int:
        if self.fd is None:
            import psutil  # only where /proc is missing: it is not imported at boot

            return int(psutil.Process().memory_info().rss)
        return int(os.pread(self.fd, 128, 0).split()[1]) * self.page


def _wait_for_wake(wake_fd: int, signal_fd: int, timeout: float) -> bool:
    """Sleep until the master wakes us, a signal arrives, or `timeout`.

    False when the master has gone (EOF on the wake pipe).
    """
    readable, _, _ = select.select([wake_fd, signal_fd], [], [], timeout)
    if signal_fd in readable:
        os.read(signal_fd, 4096)
    if wake_fd not in readable:
        return True
    try:
        return bool(os.read(wake_fd, 4096))
    except BlockingIOError:
        return True


def run_child(config: Config, spec: ChildSpec) -> int:
    """The child's body (in proc.process_frame): its work, then what its jobs left."""
    try:
        return child_main(config, spec)
    finally:
        with contextlib.suppress(Exception):
            kill_leftovers(None)


def child_crashed(error: str) -> None:
    logs.get().error(events.CHILD_CRASHED, error=error)
