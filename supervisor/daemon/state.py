"""What the master remembers about its pools and children (local state, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field

from supervisor.config import PoolConfig
from supervisor.daemon.decisions import CRASH_LOOP_AFTER
from supervisor.daemon.scoreboard import Scoreboard


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


@dataclass
class Child:
    pid: int
    name: str  # host:pid:token, its lease owner name
    pool: str
    slot: int
    status_r: int
    wake_w: int
    started: float
    board: Scoreboard  # the job it runs now, written by the child
    reported: bool = False  # sent its first message: it came up
    idle: bool = False  # said it found nothing; cleared when the master wakes it
    idle_since: float = 0.0
    kill_at: float = 0.0  # monotonic deadline for SIGKILL once SIGTERM went out; 0 = none
    term_sent_at: float | None = None
    killed_job: int | None = None  # the job it was killed for running past its timeout
    killed_timeout: float = 0.0
    killed_for_shutdown: bool = False
    cancelled_job: int | None = None  # killed because this job was cancelled
    retiring: bool = False
    retire_by: float = 0.0  # monotonic: a retiring child still alive then is killed
    exit_reason: str = ""
    buffer: bytes = b""

    @property
    def now_running(self) -> int | None:
        return self.board.read().job_id

    @property
    def jobs(self) -> int:
        """Jobs it took on: those it finished, and the one it runs now (or died in)."""
        entry = self.board.read()
        return entry.jobs + (entry.job_id is not None)

    def is_idle(self) -> bool:
        return self.idle and not self.retiring and self.now_running is None

    def on_message(self, line: str, now: float) -> None:
        """Apply one status line from the child: I (idle) | R reason (retiring)."""
        kind, _, rest = line.partition(" ")
        self.reported = True
        if kind == "I":
            if not self.idle:
                self.idle_since = now
            self.idle = True
        elif kind == "R":
            self.exit_reason = self.exit_reason or rest
            self.idle = False
