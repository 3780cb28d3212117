"""Successes written: alone, or in the transaction of the worker's next claim.

A worker acknowledges a batch of quick jobs with the claim of its next batch (one commit
per batch). The usual acknowledgement, one statement (delete or keep) for jobs in no
batch, and the claim's read go to the database as one request: on MySQL the two share a
packet (CLIENT.MULTI_STATEMENTS, with the transaction's BEGIN), so a claim is two round
trips, not three. Everything else (archive, batches, an older schema) is written first,
statement by statement, as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from supervisor.kinds import OnSuccess
from supervisor.store.dependencies import EITHER, ending_statement
from supervisor.store.superseding import SupersedeOps


class AckOps(SupersedeOps):
    """Recording successes (workers, and the master writing them in a worker's stead)."""

    def complete(self, owner: str, ids: Sequence[int], mode: str) -> int:
        """Record success of jobs this owner holds: delete, archive or keep them."""
        if not ids:
            return 0

        def attempt() -> int:
            with self._tx():
                return self.complete_in_transaction(owner, ids, mode)

        return self._retrying(attempt)

    def complete_in_transaction(self, owner: str, ids: Sequence[int], mode: str) -> int:
        """Inside an open transaction (retried whole by the caller).

        From schema 14 one statement leaves out flagged parents; only when it changed fewer
        rows than asked (a parent among them, or a lease lost) does the second pass of
        dependencies.py run, which ends them and settles their children."""
        if self.has_deps_schema():
            changed = self.complete_pass(owner, ids, mode, skip=EITHER)
            if changed < len(ids):  # dependencies: one clearly separated hook
                changed += self.complete_parents(owner, ids, mode)[0]
        elif mode == OnSuccess.KEEP:
            changed = self._execute("complete_keep", self._params(owner=owner, ids=self._ids(ids)))
        else:
            params = self._params(owner=owner, ids=self._ids(ids))
            if mode == OnSuccess.ARCHIVE:
                self._execute("complete_archive_copy", params)
            changed = self._execute("complete_delete", params)
        if self.batch_members:  # this worker claimed a batch job: the batch hook (batches.py)
            self.settle_batches_of(ids)
        return changed

    def complete_and_select(
        self, owner: str, done: Mapping[str, Sequence[int]], claim: dict[str, Any]
    ) -> tuple[int, list[dict[str, Any]]]:
        """Inside a claim's transaction: record `done` ({on_success mode: ids}), then read
        the claim's rows (claim_select with `claim`'s queue and limit). How many successes
        were recorded, and the rows."""
        modes = [(mode, ids) for mode, ids in done.items() if ids]
        plain = len(modes) == 1 and modes[0][0] != OnSuccess.ARCHIVE
        if not plain or self.batch_members or not self.has_deps_schema():
            completed = sum(self.complete_in_transaction(owner, ids, mode) for mode, ids in modes)
            return completed, self._fetchall("claim_select", claim)
        mode, ids = modes[0]
        params = {**claim, **self._params(owner=owner, ids=self._ids(ids), skip=EITHER)}
        completed, rows = self._execute_fetch(ending_statement(mode), "claim_select", params)
        if completed < len(ids):  # a parent among them, or a lease lost: the second pass
            parents_done, released = self.complete_parents(owner, ids, mode)
            completed += parents_done
            if released:
                # The children it released are ready in this transaction: read again, as
                # if the write had come first, so the next step of a chain starts now and
                # in its place in claim order, not at the next poll (this transaction's
                # own locks are never skipped; a row the second read leaves out stays
                # ready, locked until the commit).
                rows = self._fetchall("claim_select", claim)
        return completed, rows

    def _execute_fetch(
        self, write: str, read: str, params: dict[str, Any]
    ) -> tuple[int, list[dict[str, Any]]]:
        """`write`, then `read`: the rows `write` matched, and the rows `read` returned
        (MySQL sends the two in one packet)."""
        return self._execute(write, params), self._fetchall(read, params)
