"""A job whose move back into the queue collides with the holder of its unique key.

Under unique_while="queued" a job holds its key while it is scheduled, ready or waiting,
whatever its attempts (SPEC "Composing jobs"), and not while it runs: another job may
take the key meanwhile. The moves back into the queue (fail_retry, snooze, release) are
UPDATE IGNORE, so the database leaves such a job running instead of raising; it then
yields to the holder: it ends `cancelled`, last_error "superseded: its unique key is held
by job N", its waiting children and its batch settled as any cancel's. MySQL counts the
rows an UPDATE IGNORE left alone (CLIENT.FOUND_ROWS), so the job is read again, only for
jobs with a unique key: plain jobs pay no statement here.
"""

from __future__ import annotations

from collections.abc import Sequence

from supervisor.models import JobState
from supervisor.store.batches import BatchOps
from supervisor.store.dependencies import DependencyOps


class SupersedeOps(DependencyOps, BatchOps):
    """Returning held jobs to the queue, and ending superseded those the database left
    running."""

    def release(
        self,
        owner: str,
        ids: Sequence[int],
        count_attempt: bool = False,
        *,
        only_expired: bool = False,
        unique: bool = False,
    ) -> int:
        """Return held jobs to ready now; unless `count_attempt`, the claim's attempt is undone.
        `only_expired` leaves jobs whose lease is still live to their holder. `unique`: some
        have a unique key, so those the database left held end superseded (superseding.py);
        they count as settled."""
        if not ids:
            return 0
        values = dict(owner=owner, ids=self._ids(ids), only_expired=1 if only_expired else 0)
        changed = self._run("release", uncount=0 if count_attempt else 1, **values)
        if not unique:
            return changed
        ended, left = self.supersede_held(owner, ids, only_expired=only_expired)
        # MySQL counted the rows it ignored (CLIENT.FOUND_ROWS), SQLite did not
        return changed - left if self.counts_matched else changed + ended

    def supersede_held(
        self,
        owner: str,
        ids: Sequence[int],
        *,
        only_expired: bool = False,
        max_snoozes: int | None = None,
    ) -> tuple[int, int]:
        """(ended superseded, left running with no holder found) among `ids`, in one
        transaction."""
        if not ids:
            return 0, 0

        def attempt() -> tuple[int, int]:
            with self._tx():
                return self.supersede_in_transaction(owner, ids, only_expired, max_snoozes)

        return self._retrying(attempt)

    def supersede_in_transaction(
        self,
        owner: str,
        ids: Sequence[int],
        only_expired: bool = False,
        max_snoozes: int | None = None,
    ) -> tuple[int, int]:
        """supersede_held inside the caller's transaction."""
        held = self._fetchall(
            "held_unique",
            self._params(
                owner=owner,
                ids=self._ids(ids),
                only_expired=1 if only_expired else 0,
                max_snoozes=max_snoozes,
            ),
        )
        ended: list[int] = []
        for row in held:
            job_id = int(row["id"])
            holder = self._fetchall("key_holder", self._params(key=row["unique_key"], id=job_id))
            if not holder:  # the holder went meanwhile: its lease ends, the reaper moves it
                continue
            error = f"superseded: its unique key is held by job {holder[0]['id']}"
            if self._execute("supersede", self._params(owner=owner, id=job_id, error=error)):
                ended.append(job_id)
        if ended:
            if self.has_deps_schema():
                self.settle_children(ended, ended=JobState.CANCELLED)
                self.forget_parents(ended)
            self.settle_batches_of(ended)
        return len(ended), len(held) - len(ended)
