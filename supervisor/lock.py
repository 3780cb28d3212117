"""The cluster-wide lease lock of seed 001: a row per name with an owner and an expiry.

Only the owner renews or releases; an expired lock can be taken by anyone. Expiry is
judged on the database clock, so hosts with skewed clocks agree.
"""

from __future__ import annotations

from types import TracebackType

from supervisor.errors import LockHeld, LockLost
from supervisor.proc import process_name
from supervisor.store import Store


class Lock:
    def __init__(self, store: Store, name: str, ttl: float, owner: str | None = None) -> None:
        if not name or len(name) > 191:
            raise ValueError("a lock name has 1 to 191 characters")
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.store = store
        self.name = name
        self.ttl = ttl
        self.owner = owner or process_name()  # host:pid:token, new per lock
        self.held = False

    def acquire(self) -> bool:
        """Take the lock if free or expired; False when someone else holds a live lease."""
        self.held = self.store.try_lock(self.name, self.owner, self.ttl)
        return self.held

    def renew(self, ttl: float | None = None) -> None:
        """Push the expiry out by `ttl` (default: the lock's); LockLost if it is no longer ours."""
        if not self.store.renew_lock(self.name, self.owner, ttl or self.ttl):
            self.held = False
            raise LockLost(f"lock {self.name!r} expired or was taken over")

    def release(self) -> bool:
        """Give the lock up; False if it had expired (someone may hold it now)."""
        released = self.store.release_lock(self.name, self.owner)
        self.held = False
        return released

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockHeld(f"lock {self.name!r} is held by another owner")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.held:
            self.release()
