"""Flow control's decisions, pure: a job's buckets, a bucket's room, which claimed jobs run
and which wait. No I/O: the store (limits.py) reads and writes; `now` is the database
clock in epoch seconds.

A `[limits.NAME]` covers the jobs of its handlers and of its queues. Its bucket is the
limit itself, or with `per_key` one bucket per `limit_key` (a job without a key shares
the bucket of the empty key). A job may fall in several buckets (a handler's limit and
its queue's): it runs only when every one of them has room.

Rates are counted in a sliding window: rates.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from supervisor.config import LimitConfig
from supervisor.store.limits.rates import RateWindow, rate_hold

# A bucket full on concurrency is looked at again this soon (database clock) by whatever
# claim runs then, for slots freed where no claim of its own noticed (a job settled by a
# master, a lease reaped, a cancel). A worker that ends a job of a bucket with parked jobs
# hands its slot on in its very next claim.
RECHECK = 0.1
BUCKET_SEPARATOR = "/"  # NAME/KEY in forkq_jobs.limit_wait; limit names never hold it


def bucket_key_ok(limit_key: str | None) -> bool:
    """Whether a limit_key can name a bucket: not with a NUL (SQLite's JSON, which carries
    the keys of a claim's buckets, ends a string there). Enqueue refuses such a key; a
    claim ends a row that holds one dead (limits.py)."""
    return limit_key is None or "\x00" not in limit_key


class Bucket(NamedTuple):
    """One bucket of a limit. Ordered by (name, key): the one order claims lock them in.
    (A tuple: claims hash and compare buckets a few times per job.)"""

    name: str
    key: str = ""  # the jobs' limit_key with per_key; "" for the shared bucket

    @property
    def id(self) -> str:
        """What forkq_jobs.limit_wait holds for a job parked here."""
        return f"{self.name}{BUCKET_SEPARATOR}{self.key}" if self.key else self.name

    @classmethod
    def parse(cls, text: str) -> Bucket:
        name, _, key = text.partition(BUCKET_SEPARATOR)
        return cls(name, key)

    def pair(self) -> tuple[str, str]:
        return (self.name, self.key)


MEMO_SIZE = 10_000  # (handler, queue, limit_key) -> buckets, remembered per worker


@dataclass(frozen=True)
class Candidate:
    """A claimed row as the decision sees it: its place in the claim order and its buckets."""

    id: int
    buckets: tuple[Bucket, ...]
    position: tuple[int, float, int] = (0, 0.0, 0)  # (-priority, run_at, id): claim order


@dataclass
class Decision:
    run: list[int] = field(default_factory=list)  # ids, in claim order
    park: dict[Bucket, list[int]] = field(default_factory=dict)
    started: Counter[Bucket] = field(default_factory=Counter)
    skipped: list[int] = field(default_factory=list)  # could run, past `most`: left ready


def decide(
    rows: Sequence[Candidate],
    room: Mapping[Bucket, int],
    parked_head: Mapping[Bucket, tuple[int, float, int]] | None = None,
    most: int | None = None,
    earlier: Mapping[Bucket, int] | None = None,
    claimed: int = 0,
) -> Decision:
    """Run each row, in claim order, while every bucket it falls in has room; park it on
    the first one that has none. A row behind a job already parked on one of its buckets
    is parked too (behind it), so a bucket's jobs keep their order across the wait. Past
    `most` runs, rows that could run are skipped (left as they are).

    Only the claim's first job starts at once; the others wait in the child behind it,
    holding their slots. So a row after the first runs only while each of its buckets
    keeps, after it, at least as many free slots as the claim holds there (`claimed`
    jobs, `earlier` per bucket, taken by its earlier selects): else it is skipped, still
    claimable: a bucket near its bound is claimed a job at a time. A held job of a bucket
    with a rate starts within `rate_hold` of its claim, or goes back (the worker's part)."""
    decision = Decision()
    left = dict(room)
    heads = parked_head or {}
    held = dict(earlier or {})
    for row in rows:
        blocked = next(
            (
                bucket
                for bucket in row.buckets
                if left.get(bucket, 0) <= 0
                or (bucket in heads and before(heads[bucket], row.position))
            ),
            None,
        )
        if blocked is not None:
            decision.park.setdefault(blocked, []).append(row.id)
            continue
        behind = claimed + len(decision.run) > 0  # it would wait in the child, held
        if (most is not None and len(decision.run) >= most) or (
            behind and not keeps_room(row.buckets, left, held)
        ):
            decision.skipped.append(row.id)
            continue
        decision.run.append(row.id)
        for bucket in row.buckets:
            left[bucket] = left.get(bucket, 0) - 1
            held[bucket] = held.get(bucket, 0) + 1
            decision.started[bucket] += 1
    return decision


def keeps_room(
    buckets: Iterable[Bucket],
    left: Mapping[Bucket, int],
    held: Mapping[Bucket, int],
) -> bool:
    """Whether a job claimed behind others may be held: each of its buckets keeps, after
    it, at least as many free slots as the claim then holds there (so jobs that wait
    never fill a bucket)."""
    return all(left.get(b, 0) - 1 >= held.get(b, 0) + 1 for b in buckets)


def before(a: tuple[int, float, int], b: tuple[int, float, int]) -> bool:
    """Whether claim position `a` (-priority, run_at, id) comes before `b`. Times read
    as doubles and as microseconds may differ in their last digit: within two
    microseconds they are the same time, and the ids decide."""
    if a[0] != b[0]:
        return a[0] < b[0]
    if abs(a[1] - b[1]) > 2e-6:
        return a[1] < b[1]
    return a[2] < b[2]


def room_in(limit: LimitConfig | None, running: int, window: RateWindow | None) -> int:
    """Jobs a bucket may start now: below its concurrency and its rate, whichever is less.
    A bucket of a limit no longer configured has room for everything parked on it."""
    if limit is None:
        return UNLIMITED
    rooms = []
    if limit.concurrency is not None:
        rooms.append(limit.concurrency - running)
    if limit.rate is not None and window is not None:
        rooms.append(limit.rate.count - window.used)
    return max(0, min(rooms)) if rooms else UNLIMITED


UNLIMITED = 1_000_000


def wake_at(
    limit: LimitConfig | None, running: int, window: RateWindow | None, now: float
) -> float:
    """When a bucket with parked jobs should be looked at again: when its rate frees a
    slot if the rate is what holds it, else soon (a slot freed by a job's end)."""
    rate = None if limit is None else limit.rate
    if rate is not None and window is not None and window.used >= rate.count:
        return max(now, window.free_at(rate.count))
    return now + RECHECK


class LimitPlan:
    """The configured limits as one worker uses them while it claims.

    Built once per worker from the config and the handlers' registered queues. A queue is
    claimed under limits when a limit names it, or names a handler registered to it; a
    job of a limited handler enqueued to another queue is found by the plain claim, which
    then claims that queue under limits from then on.
    """

    def __init__(self, limits: Iterable[LimitConfig], handler_queues: Mapping[str, str]) -> None:
        self.limits: dict[str, LimitConfig] = {limit.name: limit for limit in limits}
        self._by_handler: dict[str, list[LimitConfig]] = {}
        self._by_queue: dict[str, list[LimitConfig]] = {}
        for limit in self.limits.values():
            for handler in limit.handlers:
                self._by_handler.setdefault(handler, []).append(limit)
            for queue in limit.queues:
                self._by_queue.setdefault(queue, []).append(limit)
        self.limited_queues: set[str] = set(self._by_queue) | {
            handler_queues[h] for h in self._by_handler if h in handler_queues
        }
        self._memo: dict[tuple[str, str, str | None], tuple[Bucket, ...]] = {}
        # rate_hold of each limit with a rate (hold_for asks it for each job a claim takes)
        self._holds = {
            name: hold for name, limit in self.limits.items() if (hold := rate_hold(limit))
        }
        self.next_look = 0.0  # monotonic: when this worker next looks at due buckets
        self.freed: Counter[Bucket] = Counter()  # slots this worker freed there since
        # Monotonic: when this worker's last claim that locked buckets had their rows back:
        # the instant their rate windows counted its jobs (all but the answer's trip back).
        # None until a claim locks one (work/holds.py times holds from it).
        self.counted_at: float | None = None
        self.rated = bool(self._holds)

    def __bool__(self) -> bool:
        return bool(self.limits)

    def limits_for(self, handler: str, queue: str) -> list[LimitConfig]:
        found = {limit.name: limit for limit in self._by_handler.get(handler, ())}
        found.update((limit.name, limit) for limit in self._by_queue.get(queue, ()))
        return [found[name] for name in sorted(found)]

    def buckets_for(self, handler: str, queue: str, limit_key: str | None) -> tuple[Bucket, ...]:
        found = self._memo.get((handler, queue, limit_key))
        if found is None:
            if len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
            found = self._memo[handler, queue, limit_key] = tuple(
                Bucket(limit.name, (limit_key or "") if limit.per_key else "")
                for limit in self.limits_for(handler, queue)
            )
        return found

    def hold_for(self, handler: str, queue: str, limit_key: str | None) -> float | None:
        """How long after its claim a job may still start (the shortest `rate_hold` of its
        buckets); None when no rate covers it."""
        holds = self._holds
        buckets = self.buckets_for(handler, queue, limit_key)
        return min((holds[b.name] for b in buckets if b.name in holds), default=None)

    def covers(self, handler: str, queue: str) -> bool:
        return handler in self._by_handler or queue in self._by_queue

    def running(
        self, usage: Iterable[Mapping[str, object]], buckets: Iterable[Bucket]
    ) -> Counter[Bucket]:
        """Running jobs per bucket, from limit_usage rows (handler, queue, limit_key, n)."""
        wanted = set(buckets)
        counts: Counter[Bucket] = Counter()
        for row in usage:
            key = row["limit_key"]
            for bucket in self.buckets_for(
                str(row["handler"]), str(row["queue"]), None if key is None else str(key)
            ):
                if bucket in wanted:
                    counts[bucket] += int(str(row["n"]))
        return counts

    def ended(self, handler: str, queue: str, limit_key: str | None) -> None:
        """A job this worker ran has left `running`: its next claim locks the job's
        buckets (most often it does anyway, for the jobs it takes) and hands the slot to
        the first job parked there, if any, even one another host parked meanwhile."""
        for bucket in self.buckets_for(handler, queue, limit_key):
            self.freed[bucket] += 1
