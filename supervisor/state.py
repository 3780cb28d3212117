"""What the master remembers about its pools and children (local state, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .config import PoolConfig
from .pools import CRASH_LOOP_AFTER


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
    reported: bool = False  # sent its first message: it came up
    idle: bool = False
    idle_since: float = 0.0
    job_id: int | None = None
    job_timeout: float = 0.0
    jobs: int = 0
    kill_at: float = 0.0  # monotonic deadline for the next kill stage; 0 = none
    term_sent_at: float | None = None
    killed_for_timeout: bool = False
    killed_for_shutdown: bool = False
    retiring: bool = False
    exit_reason: str = ""
    buffer: bytes = b""

    def on_message(self, line: str, now: float) -> None:
        """Apply one status line from the child: S id timeout | F id outcome | I | R reason."""
        kind, _, rest = line.partition(" ")
        self.reported = True
        if kind == "S":
            job, _, timeout = rest.partition(" ")
            self.job_id, self.job_timeout, self.idle = int(job), float(timeout or 0), False
        elif kind == "F":
            self.job_id, self.jobs = None, self.jobs + 1
        elif kind == "I":
            if not self.idle:
                self.idle_since = now
            self.idle, self.job_id = True, None
        elif kind == "R":
            self.exit_reason = self.exit_reason or rest
            self.idle = False
