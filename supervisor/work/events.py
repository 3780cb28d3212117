"""What a worker tells its surroundings, and hears back: the daemon child's master (its
ledger and status pipe, daemon/child.py's PipeEvents), the process title (`forkq work`),
or nobody (NoEvents, the base of both the foreground's events and tests')."""

from __future__ import annotations

from typing import Protocol

from supervisor.models import JobRow
from supervisor.outcomes import Outcome


class WorkerEvents(Protocol):
    """What the worker tells its surroundings (the master's pipe and ledger, the title)."""

    can_hand_back: bool  # someone takes back unstarted jobs from a busy worker: batch claims

    def claiming(self) -> None: ...
    def claimed(self, ids: list[int]) -> None: ...
    def start(self, job: JobRow, timeout: float) -> bool: ...  # False: taken back, skip it
    def unhold(self, ids: list[int]) -> list[int]: ...  # off the held list: those still on it
    def job_ran(self, job: JobRow) -> None: ...
    # `more`: another held job starts next; its start may list this success.
    def succeeded(self, job_id: int, more: bool = False) -> None: ...
    def job_finished(self, job: JobRow, outcome: Outcome) -> None: ...
    def written_elsewhere(self) -> list[int]: ...  # successes the master acknowledged
    # Claimed several jobs; `more`: the claim was full, more may wait for an idle sibling.
    def holding(self, more: bool) -> None: ...
    def idle(self) -> None: ...


class NoEvents:
    """Nobody takes jobs back (`forkq work`): one job per claim. Subclasses tell the title."""

    can_hand_back = False

    def claiming(self) -> None:
        pass

    def claimed(self, ids: list[int]) -> None:
        pass

    def start(self, job: JobRow, timeout: float) -> bool:
        self.job_started(job, timeout)
        return True

    def unhold(self, ids: list[int]) -> list[int]:
        return ids

    def job_started(self, job: JobRow, timeout: float) -> None:
        pass

    def succeeded(self, job_id: int, more: bool = False) -> None:
        pass

    def written_elsewhere(self) -> list[int]:
        return []

    def holding(self, more: bool) -> None:
        pass

    def job_ran(self, job: JobRow) -> None:
        pass

    def job_finished(self, job: JobRow, outcome: Outcome) -> None:
        pass

    def idle(self) -> None:
        pass
