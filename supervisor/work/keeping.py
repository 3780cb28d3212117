"""What a worker keeps beyond the job row: a handler's return value (`keep_result`, on the
handler or its pool) and the end of each attempt that did not succeed (store/results.py).

Kept apart from the claim → run → ack loop so a job that keeps nothing and succeeds pays
one dict lookup here, no statement: its success is batched as before.
"""

from __future__ import annotations

import contextlib
import json
import time

from supervisor import registry
from supervisor.config import Config
from supervisor.errors import DatabaseError
from supervisor.models import JobRow
from supervisor.outcomes import Attempt, Outcome
from supervisor.store import Store
from supervisor.wake.places import store_identity
from supervisor.wake.waiters import wake_waiters, worker_wait_dir

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
SLOW_KEPT = 0.05  # seconds: a kept job this long writes its value before the next job runs


class Keeper:
    """One worker's decisions on results, and its wake-ups of same-host `Queue.wait`s."""

    def __init__(self, store: Store, config: Config) -> None:
        self.store = store
        self.config = config
        self._keeps: dict[tuple[str, str], bool] = {}
        self._wait_dir: str | None = None

    def keeps(self, row: JobRow) -> bool:
        """Whether the job's handler or pool keeps its return value (cached per pair)."""
        key = (row.handler, row.queue)
        found = self._keeps.get(key)
        if found is None:
            registered = registry.get(row.handler)
            pool = self.config.pool(row.queue)
            found = self._keeps[key] = bool(
                (registered is not None and registered.keep_result)
                or (pool is not None and pool.keep_result)
            )
        return found

    def encoded(self, attempt: Attempt, row: JobRow) -> tuple[Attempt, str | None]:
        """The attempt and its return value as JSON text; a value that is no JSON, or
        that the database would refuse (too long for it), ends the attempt dead: another
        attempt would return the same, and a write refused would be tried for ever."""
        try:
            text = _ENCODER.encode(getattr(attempt, "value", None))
            text.encode("utf-8")  # a lone surrogate passes the encoder, then no driver takes it
        except Exception as exc:  # whatever its own methods raise (a dict subclass): not JSON
            error = f"its return value is kept but is not JSON: {type(exc).__name__}: {exc}"
            return Attempt(Outcome.DEAD, error, None, True), None
        refused = None
        with contextlib.suppress(DatabaseError):  # unmeasured: the write will tell
            refused = self.store.too_large_to_keep(row.id, row.queue, text)
        if refused:
            return Attempt(Outcome.DEAD, refused, None, True), None
        return attempt, text

    def wake(self, job_id: int) -> None:
        """Tell same-host waiters of the job that it ended (best effort, never raises)."""
        try:
            if self._wait_dir is None:
                identity = store_identity(self.store)
                self._wait_dir = worker_wait_dir(identity) if identity else ""
            if self._wait_dir:
                wake_waiters(self._wait_dir, job_id)
        except Exception:
            return


def kept_first(done: JobRow, durations: list[float], held: list[JobRow]) -> bool:
    """Whether a batch's kept values are written before its next job starts, not with the
    next claim: when that job is another handler's (how long it runs is not known here) or
    this handler is slow (another like it would keep the value waiting as long). Quick jobs
    of one handler keep theirs for the next claim or ACK_MAX_AGE, whichever comes first."""
    slow = bool(durations) and durations[-1] > SLOW_KEPT
    return bool(held) and (held[0].handler != done.handler or slow)


def wall_start(duration: float) -> float:
    """The wall-clock start of an attempt that took `duration` seconds and just ended."""
    return time.time() - duration
