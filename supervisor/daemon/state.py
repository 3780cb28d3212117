"""What the master remembers about its pools and children (local state, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from supervisor.config import PoolConfig
from supervisor.daemon.decisions import CRASH_LOOP_AFTER
from supervisor.daemon.ledger import Ledger
from supervisor.daemon.scoreboard import Scoreboard
from supervisor.kinds import OnSuccess
from supervisor.store import Store
from supervisor.work.sizing import ClaimSizing


@dataclass
class PoolState:
    config: PoolConfig
    minimum: int = 0
    maximum: int = 0
    target: int = 0
    slots: set[int] = field(default_factory=set)
    failures: int = 0  # consecutive start-up failures
    next_spawn: float = 0.0  # monotonic; back-off after start-up failures
    saturated: bool = False  # every child busy at max size with due jobs waiting (last scale tick)
    saturated_ticks: int = 0  # consecutive check ticks saturated
    jobs_done: int = 0  # by children that have exited
    sizing: ClaimSizing | None = None  # the last child's that retired: the next one's start
    memory_warned: bool = False  # memory_limit_too_low said (once a pool, until a reload)

    def __post_init__(self) -> None:
        self.minimum = self.config.workers
        self.maximum = max(self.config.max_workers, self.config.workers)
        self.target = self.minimum

    def free_slot(self) -> int:
        slot = 1
        while slot in self.slots:
            slot += 1
        return slot

    @property
    def crash_looping(self) -> bool:
        return self.failures >= CRASH_LOOP_AFTER


def reloaded_pools(
    configs: Iterable[PoolConfig], old: dict[str, PoolState]
) -> dict[str, PoolState]:
    """The pools after a reload: sizes from the new config, slots kept (titles stay). A
    crash loop is kept too (only a child that starts ends it: a reload must not read as
    its fix), not its back-off: the next child, of the reloaded code, starts at once."""
    pools = {}
    for config in configs:
        state = PoolState(config)
        if config.name in old:
            state.slots = old[config.name].slots
            state.failures = old[config.name].failures
        pools[config.name] = state
    return pools


class Phase(StrEnum):
    """What a child last told the master about itself (its status pipe)."""

    STARTING = "starting"  # forked, has not reported in yet
    WORKING = "working"  # reported in; running a job or about to claim one
    IDLE = "idle"  # found nothing to claim; the master's wake makes it WORKING again
    LEAVING = "leaving"  # exiting on its own (recycled: max jobs, memory)


class KillCause(StrEnum):
    """Why the master is ending a child's job in two stages (SIGTERM, then SIGKILL)."""

    OVERTIME = "overtime"  # the job ran past its timeout plus the child's own grace
    CANCEL = "cancel"  # the job was cancelled


@dataclass
class Termination:
    """A two-stage kill under way: SIGTERM went to the group, SIGKILL is due at `kill_at`
    (monotonic; None once it has gone out)."""

    cause: KillCause
    job_id: int
    kill_at: float | None
    timeout: float = 0.0  # the job's timeout (OVERTIME), for its settle message


@dataclass
class Child:
    """One forked worker: what it told us (`phase`) and what we did to it (retiring,
    a two-stage kill, an immediate SIGKILL), each a field of its own."""

    pid: int
    name: str  # host:pid:token, its lease owner name
    pool: str
    slot: int
    status_r: int
    wake_w: int
    started: float
    board: Scoreboard  # the job it runs now, written by the child
    ledger: Ledger  # the jobs it holds unstarted and its unwritten successes (handback.py)
    phase: Phase = Phase.STARTING
    idle_since: float = 0.0
    retire_by: float | None = None  # asked to finish and exit; killed if alive then (monotonic)
    ending: Termination | None = None
    sigkilled: bool = False  # SIGKILLed at once for the operator's sake (shutdown, retire deadline)
    exit_reason: str = ""
    sizing: ClaimSizing | None = None  # its claim sizing, said as it retired
    buffer: bytes = b""
    # (job, its start) the master last took back this child's jobs for: once per job run
    handed_back: tuple[int, float] | None = None
    on_success: OnSuccess = (
        OnSuccess.DELETE
    )  # its pool's mode when it was forked (what it writes itself)
    # The database it works, when a reload moved the master to another one: its jobs and
    # row are settled there (settling.py), not in the master's new database.
    store: Store | None = None

    @property
    def reported(self) -> bool:
        """It sent its first message: it came up."""
        return self.phase is not Phase.STARTING

    @property
    def retiring(self) -> bool:
        return self.retire_by is not None

    @property
    def killed_job(self) -> int | None:
        """The job it was killed for running past its timeout."""
        ending = self.ending
        return ending.job_id if ending and ending.cause is KillCause.OVERTIME else None

    @property
    def cancelled_job(self) -> int | None:
        """The job it was killed for because that job was cancelled."""
        ending = self.ending
        return ending.job_id if ending and ending.cause is KillCause.CANCEL else None

    @property
    def now_running(self) -> int | None:
        return self.board.read().job_id

    @property
    def jobs(self) -> int:
        """Jobs it took on: those it finished, and the one it runs now (or died in)."""
        entry = self.board.read()
        return entry.jobs + (entry.job_id is not None)

    def close(self) -> None:
        """Reaped: its shared memory goes."""
        self.board.close()
        self.ledger.close()

    def is_idle(self) -> bool:
        return self.phase is Phase.IDLE and not self.retiring and self.now_running is None

    def on_message(self, line: str, now: float) -> None:
        """Apply one status line from the child: I (idle) | R batch job_time reason
        (retiring: its claim sizing, then why)."""
        kind, _, rest = line.partition(" ")
        if kind == "I":
            if self.phase is not Phase.IDLE:
                self.idle_since = now
            self.phase = Phase.IDLE
        elif kind == "R":
            batch, _, rest = rest.partition(" ")
            job_time, _, reason = rest.partition(" ")
            self.sizing = ClaimSizing.heard(f"{batch} {job_time}")
            self.exit_reason = self.exit_reason or reason
            self.phase = Phase.LEAVING
        elif self.phase is Phase.STARTING:
            self.phase = Phase.WORKING

    def woken(self) -> None:
        """The master wrote to its wake pipe: it claims again, and says idle if it finds nothing."""
        if self.phase is Phase.IDLE:
            self.phase = Phase.WORKING
