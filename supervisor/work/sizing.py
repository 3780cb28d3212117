"""How many jobs a worker claims at once, while someone can take back what it holds.

Slow start: one job, then doubling per batch while jobs are quick, up to `claim_batch`
and about BATCH_BUDGET seconds of work, so even the last job of a batch starts soon;
one job again after a batch of slow ones, two after idling.

A child that retires (max_jobs_per_child, max_child_lifetime, memory_limit_mb) hands
its sizing to the next child of its pool through the master (the status pipe's `R`
line): the new child goes on where the old one stopped, as if it had not been
recycled, instead of claiming 1, 2, 4, ... again, one commit each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

QUICK_JOB = 0.01  # seconds: jobs faster than this on average are claimed in growing batches
BATCH_BUDGET = 0.02  # seconds of work a batch of quick jobs should hold at most
MOST_HELD = 256  # jobs one claim takes at most (the ledger's capacity)


@dataclass
class ClaimSizing:
    batch: int = 1  # grows while jobs are quick
    job_time: float = 0.0  # seconds a typical job of the last batch took (0: none yet)

    def size(self, claim_batch: int) -> int:
        """The next claim's size under the pool's `claim_batch`."""
        budget = int(BATCH_BUDGET / self.job_time) if self.job_time > 0 else MOST_HELD
        return max(1, min(claim_batch, self.batch, max(1, budget), MOST_HELD))

    def after_batch(self, mean: float, typical: float) -> None:
        """A batch ran: its jobs' mean and typical (median) time. The typical job, not
        the mean: one slow job among quick ones (the master hands back what waits
        behind it) must not shrink the next claims of quick ones to a job or two."""
        self.job_time = min(mean, typical)
        self.batch = min(self.batch * 2, MOST_HELD) if self.job_time < QUICK_JOB else 1

    def after_idle(self) -> None:
        """Nothing to claim: a burst then goes to idle siblings as well, two each (a full
        claim wakes the next one), not all to whichever child a nudge woke."""
        self.batch = 2

    def said(self) -> str:
        """For the status pipe: `batch job_time`."""
        return f"{self.batch} {self.job_time!r}"

    @classmethod
    def heard(cls, text: str) -> ClaimSizing | None:
        """What `said` wrote; None for anything else (never trusted past its bounds)."""
        try:
            batch_text, time_text = text.split(" ")
            batch, job_time = int(batch_text), float(time_text)
        except ValueError:
            return None
        if not 1 <= batch <= MOST_HELD or not math.isfinite(job_time) or job_time < 0:
            return None
        return cls(batch, job_time)
