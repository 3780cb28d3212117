"""Monotonic timers for the master's loop."""

from __future__ import annotations


class Periodic:
    """A monotonic timer that skips missed periods instead of firing them back to back."""

    def __init__(self, interval: float, now: float, first: float | None = None) -> None:
        self.interval = interval
        self.next = now + (interval if first is None else first)

    def due(self, now: float) -> bool:
        if now < self.next:
            return False
        periods = int((now - self.next) // self.interval) + 1
        self.next += periods * self.interval
        return True

    def remaining(self, now: float) -> float:
        return max(0.0, self.next - now)
