"""Per-handler timing: how long attempts take and how many fail, as compact histograms.

A pool child adds each attempt to a `Tally` (a dict look-up and a bisect), sends what it
gathered to its master at most once a second (`encode`, a status-pipe line), and the
master adds the lines of all its children (`absorb`) into what its next heartbeat writes:
one row per handler per minute per host in forkq_handler_stats. The dashboard merges
rows (`merge`) and reads percentiles from them (`percentile`). Pure: no I/O here.

Buckets are fixed and log-spaced, a factor 2 apart from 1 ms to about 70 minutes, so
rows from any host and minute add up bucket by bucket; each row also keeps its fastest
and slowest attempt, which bound the estimate inside the first and last bucket.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from supervisor.outcomes import Outcome

BOUNDS = tuple(0.001 * 2**i for i in range(23))  # upper bounds (seconds) of all but the last
BUCKETS = len(BOUNDS) + 1  # 24: [0, 1 ms), [1 ms, 2 ms), ... [~70 min, ∞)
MOST_HANDLERS = 200  # a child's line names at most this many; the rest add up as OTHER
OTHER = "(other handlers)"
SEND_EVERY = 1.0  # seconds: a busy child sends its tally at most this often (and when idle)
FAILED_OUTCOMES = frozenset({Outcome.RETRY, Outcome.DEAD, Outcome.TIMEOUT})  # snoozed: not failed


@dataclass
class Stats:
    """One handler's attempts: how many, how many failed, their total, fastest and
    slowest duration (seconds), and how many fell in each bucket."""

    jobs: int = 0
    failed: int = 0
    seconds: float = 0.0
    fastest: float | None = None
    slowest: float | None = None
    buckets: list[int] = field(default_factory=lambda: [0] * BUCKETS)

    def add(self, other: Stats) -> None:
        self.jobs += other.jobs
        self.failed += other.failed
        self.seconds += other.seconds
        self.fastest = _least(self.fastest, other.fastest)
        self.slowest = _most(self.slowest, other.slowest)
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets, strict=True)]

    @property
    def failure_rate(self) -> float:
        return self.failed / self.jobs if self.jobs else 0.0

    def percentile(self, q: float) -> float | None:
        return percentile(self.buckets, q, self.fastest, self.slowest)

    def as_list(self) -> list[Any]:
        return [self.jobs, self.failed, self.seconds, self.fastest, self.slowest, self.buckets]

    @classmethod
    def from_list(cls, values: list[Any]) -> Stats:
        jobs, failed, seconds, fastest, slowest, buckets = values
        counts = [int(b) for b in buckets][:BUCKETS]
        counts += [0] * (BUCKETS - len(counts))
        return cls(int(jobs), int(failed), float(seconds), fastest, slowest, counts)


class Tally:
    """The child's side: attempts since its last line, per handler. `add` is the whole
    per-job cost (a dict look-up, a bisect, a few additions)."""

    def __init__(self) -> None:
        self.by_handler: dict[str, list[Any]] = {}

    def add(self, handler: str, seconds: float, failed: bool) -> None:
        entry = self.by_handler.get(handler)
        if entry is None:
            if len(self.by_handler) >= MOST_HANDLERS and handler != OTHER:
                self.add(OTHER, seconds, failed)
                return
            entry = self.by_handler[handler] = [0, 0, 0.0, seconds, seconds, [0] * BUCKETS]
        entry[0] += 1
        entry[1] += failed
        entry[2] += seconds
        if seconds < entry[3]:
            entry[3] = seconds
        elif seconds > entry[4]:
            entry[4] = seconds
        entry[5][bisect_right(BOUNDS, seconds)] += 1

    def encode(self) -> str:
        """What it gathered as one line (JSON, no newline), and a fresh start; "" if none."""
        if not self.by_handler:
            return ""
        line = json.dumps(self.by_handler, separators=(",", ":"))
        self.by_handler = {}
        return line


def absorb(into: dict[str, Stats], line: str) -> None:
    """The master's side: add one child's line to `into`; a malformed line is dropped."""
    try:
        decoded = json.loads(line)
        parsed = {str(h): Stats.from_list(v) for h, v in decoded.items()}
    except (ValueError, TypeError, AttributeError):
        return
    for handler, stats in parsed.items():
        into.setdefault(handler, Stats()).add(stats)


def merge(rows: Iterable[tuple[str, Stats]]) -> dict[str, Stats]:
    """Rows (handler, stats) of any hosts and minutes, added up per handler."""
    out: dict[str, Stats] = {}
    for handler, stats in rows:
        out.setdefault(handler, Stats()).add(stats)
    return out


def percentile(
    buckets: list[int],
    q: float,
    fastest: float | None = None,
    slowest: float | None = None,
) -> float | None:
    """The q-th quantile (0..1) of the durations counted in `buckets`, None when empty.

    Linear inside the bucket where the rank falls; that bucket's bounds are narrowed to
    the fastest and slowest duration seen, so durations all in one bucket come out
    between the two rather than anywhere in the factor-2 span.
    """
    counts = buckets
    total = sum(counts)
    if total <= 0:
        return None
    rank = min(max(q, 0.0), 1.0) * total
    seen = 0
    for index, count in enumerate(counts):
        if count <= 0 or seen + count < rank:
            seen += count
            continue
        low = BOUNDS[index - 1] if index > 0 else 0.0
        high = BOUNDS[index] if index < len(BOUNDS) else max(low * 2, slowest or 0.0)
        if fastest is not None:
            low = min(max(low, fastest), high)
        if slowest is not None:
            high = max(min(high, slowest), low)
        return low + (high - low) * max(0.0, rank - seen) / count
    return slowest


def seconds_text(value: float | None) -> str:
    """A duration as the table shows it: 0.4 ms, 85 ms, 1.2 s, 3.5 min."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    if value < 0.001:
        return f"{value * 1000:.2f} ms"
    if value < 1:
        return f"{value * 1000:.3g} ms"
    if value < 120:
        return f"{value:.3g} s"
    return f"{value / 60:.3g} min"


def _least(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _most(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)
