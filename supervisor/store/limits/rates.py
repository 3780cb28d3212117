"""A rate's window: starts counted per slice of a tenth of the period, on the database
clock (the pure part; claims.py and locks.py read and write it under the bucket's lock).

Rates are counted over a sliding window in slices of a tenth of the period: a start is
allowed while fewer than N starts fall in the slice now running and the eleven before it.
Those twelve slices cover at least the last period and a slice, and a claimed job starts
within a slice of the instant its claim counted it: within `rate_hold`, half a slice, of
when the claim had its buckets' rows back (its statements, commit and the jobs held
before it come out of that), or it goes back unstarted (work/holds.py); the other half
is left for the answer's trip back from the server. So no span of one period ever holds
more than N handler starts; the price is that a start leaves the count up to two tenths
of a period late (a steady stream gets N per 1.1 to 1.2 periods).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from supervisor.config import LimitConfig

RATE_SLICES = 10  # a period in slices; the window counts these, one more and the one now running
WINDOW_SLICES = RATE_SLICES + 2


@dataclass
class RateWindow:
    """Starts per slice of `slice_us` microseconds, `counts[0]` for slice number `base`."""

    slice_us: int
    base: int
    counts: list[int]

    @classmethod
    def empty(cls, slice_us: int, now: float) -> RateWindow:
        return cls(slice_us, _slice(now, slice_us) - WINDOW_SLICES + 1, [0] * WINDOW_SLICES)

    @classmethod
    def load(
        cls, slice_us: int, stored: tuple[int | None, int | None, str | None], now: float
    ) -> RateWindow:
        """The window as stored (slice length, base, counts), slid to `now`.

        Slices are placed by their numbers, so a row of another length (eleven slices,
        written before the window reached a slice further back) keeps its starts where they
        fell. A row written with another slice length (the period was changed) is carried
        over whole into the slice now running: its starts still count, conservatively, for
        one more period, so a config change never lets a burst through.
        """
        row_slice, base, text = stored
        window = cls.empty(slice_us, now)
        if not row_slice or base is None or not text:
            return window
        try:
            counts = [max(0, int(part)) for part in text.split(",")]
        except ValueError:  # not ours: count it as nothing rather than fail every claim
            return window
        if int(row_slice) != slice_us:
            window.counts[-1] = cls(int(row_slice), int(base), counts).slid(now).used
            return window
        for number, count in enumerate(counts, int(base)):
            # A slice ahead of now (the database clock went back) counts as now's.
            index = min(number - window.base, WINDOW_SLICES - 1)
            if index >= 0:
                window.counts[index] += count
        return window

    def slid(self, now: float) -> RateWindow:
        """The same starts in the window that ends with the slice `now` falls in."""
        base = _slice(now, self.slice_us) - (len(self.counts) - 1)
        shift = base - self.base
        if shift <= 0:
            return self
        kept = self.counts[shift:] if shift < len(self.counts) else []
        return RateWindow(self.slice_us, base, kept + [0] * (len(self.counts) - len(kept)))

    @property
    def used(self) -> int:
        return sum(self.counts)

    def record(self, starts: int) -> None:
        self.counts[-1] += starts

    def free_at(self, allowed: int) -> float:
        """When the window will have room for one more start (epoch seconds)."""
        excess = self.used - allowed + 1
        for index, count in enumerate(self.counts):
            excess -= count
            if excess <= 0:
                # slice base + index leaves the window once base + index + 12 begins
                return (self.base + index + len(self.counts)) * self.slice_us / 1e6
        return (self.base + 2 * len(self.counts)) * self.slice_us / 1e6  # not reached

    def dump(self) -> tuple[int, int, str]:
        return self.slice_us, self.base, ",".join(str(c) for c in self.counts)


def _slice(now: float, slice_us: int) -> int:
    return math.floor(now * 1_000_000) // slice_us


def slice_us(limit: LimitConfig) -> int | None:
    """The slice length of a limit's rate in microseconds; None without a rate."""
    if limit.rate is None:
        return None
    return max(1, round(limit.rate.period * 1_000_000 / RATE_SLICES))


def rate_hold(limit: LimitConfig) -> float | None:
    """Seconds within which a job of a bucket with this limit's rate must start, from when
    its claim had the bucket's row back, or go back unstarted (held behind a slower job):
    half a slice. The window reaches a slice past the period, so its count still holds the
    job when it starts, the other half left for the answer's trip back. None without a
    rate."""
    if limit.rate is None:
        return None
    return limit.rate.period / RATE_SLICES / 2
