"""The master's hand-back: a child whose job runs past the grace gives back what it holds.

A child claims quick jobs in batches (work/worker.py), and the batch is decided before
anyone knows the next job is slow. When the job a child runs goes on past
HANDBACK_GRACE while its ledger (ledger.py) lists jobs it has not started or successes
it has not written, the master takes them out under the ledger's lock and, in one
transaction of its own, returns the unstarted jobs to ready (no attempt counted),
writes the successes, and records the running job's start if its claim did not (a job
claimed behind another starts unrecorded: started_at stays NULL, "claimed", until then).
Then it wakes the pool's idle children to claim the returned jobs. So no job waits
behind another for longer than the grace while a worker of its pool is free.

What the database cannot take now waits in `unwritten` and is tried again on the next
loop turn, for as long as the database is unreachable or locked (an application's long
SQLite transaction): the child no longer lists those jobs, so nobody else writes them
meanwhile, and a success dropped would run again when its lease ran out. If the child
dies first, settling its jobs returns them (see settling.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from supervisor import events
from supervisor.daemon.children import Children
from supervisor.daemon.decisions import handback_due
from supervisor.models import HandBack

HANDBACK_GRACE = 0.025  # seconds a job runs before the jobs claimed behind it go back
# ...while no child of its pool is idle: then the jobs would only go back to wait for a
# busy sibling's next claim, at the price of a transaction and that claim; a child that
# turns idle wakes the master, and the short grace applies again.
BUSY_GRACE = 0.25
MOST_TRIES = 5  # a hand-back a reachable database refused this often is dropped (see below)


@dataclass
class _Unwritten:
    owner: str
    pool: str
    on_success: str  # the mode of the child's own pool config (a HUP may have changed it)
    job_id: int  # the job the child was running
    successes: list[int]
    unstarted: list[int]
    unmarked: int | None
    started: float  # monotonic: when that job started
    tries: int = 0


class HandBacks:
    """Carries out hand-backs. `write(owner, hand_back)` is the master's guarded store
    call: the jobs returned, or None when the database did not take it."""

    def __init__(
        self,
        children: Children,
        write: Callable[[str, HandBack], int | None],
        reachable: Callable[[], bool],
        log: Any,
    ) -> None:
        self.children = children
        self.write = write
        self.reachable = reachable  # False while the breaker is open (dbguard.py)
        self.log = log
        self.unwritten: list[_Unwritten] = []
        self.grace: dict[str, float] = {}  # pool -> its grace now (the idle look of `run`)

    def run(self, now: float) -> None:
        """Take back from every child whose job has run past the grace, then write. Each
        child learns how many of its pool's children are idle (ledger.tell_idle)."""
        idle: dict[str, int] = {}
        # Each child's look taken once: it may turn idle between two (its job ends), and
        # a count taken twice could go below zero (which the ledger cannot hold).
        looks = [(child, child.is_idle()) for child in self.children]
        for child, is_idle in looks:
            idle[child.pool] = idle.get(child.pool, 0) + is_idle
        for child, is_idle in looks:
            child.ledger.tell_idle(idle[child.pool] - is_idle)
        self.grace = {pool: HANDBACK_GRACE if n else BUSY_GRACE for pool, n in idle.items()}
        for child in self.children:
            if child.ending is not None or child.sigkilled:
                continue  # being killed: settling returns what it held
            entry = child.board.read()  # without the lock: only whether to look
            if entry.job_id is None or child.handed_back == (entry.job_id, entry.started):
                continue
            grace = self.grace[child.pool]
            if not child.ledger.pending() or not handback_due(entry.started, now, grace):
                continue
            taken = child.ledger.take(child.board, grace, now)  # reads it again
            if taken.running is None:
                continue  # it moved on meanwhile, or held the lock: next turn
            child.handed_back = (taken.running, taken.started)  # once per job run
            if taken:
                self.unwritten.append(
                    _Unwritten(
                        child.name,
                        child.pool,
                        child.on_success,
                        taken.running,
                        taken.successes,
                        taken.unstarted,
                        taken.unmarked,
                        taken.started,
                    )
                )
        self.write_pending()

    def write_pending(self) -> None:
        """Write what was taken, in order. The child no longer lists those jobs, so nobody
        else writes them meanwhile; if it dies first, settling returns them. A call the
        breaker skipped or that found the database locked or gone is no try: it waits for
        the database. One a reachable database refuses MOST_TRIES times (a statement of
        ours it cannot take) is dropped rather than block the others: its jobs are then
        settled with their holder, or reaped when their lease ends."""
        while self.unwritten:
            item = self.unwritten[0]
            hand_back = HandBack(
                successes=item.successes,
                on_success=item.on_success,
                unstarted=item.unstarted,
                running=item.unmarked,
                running_for=max(0.0, time.monotonic() - item.started),
            )
            returned = self.write(item.owner, hand_back)
            if returned is None:
                item.tries += self.reachable()
                if item.tries < MOST_TRIES:
                    return  # the database did not answer: next loop turn
                self.log.warning(events.HAND_BACK_DROPPED, pool=item.pool, behind=item.job_id)
                self.unwritten.pop(0)
                continue
            self.unwritten.pop(0)
            self.log.info(
                events.JOBS_HANDED_BACK,
                pool=item.pool,
                behind=item.job_id,
                returned=returned,
                acknowledged=len(item.successes),
            )
            if returned:
                self.children.wake_idle(item.pool, returned)

    def next_due(self) -> float | None:
        """When the next hand-back may be due (monotonic), for the master's sleep."""
        dues = []
        for child in self.children:
            if child.ending is not None or child.sigkilled or not child.ledger.pending():
                continue
            entry = child.board.read()
            if entry.job_id is not None and child.handed_back != (entry.job_id, entry.started):
                dues.append(entry.started + self.grace.get(child.pool, HANDBACK_GRACE))
        if self.unwritten:
            dues.append(time.monotonic() + 0.1)
        return min(dues, default=None)
