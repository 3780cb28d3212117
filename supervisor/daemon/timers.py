"""Monotonic timers for the master's loop."""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.cluster.promote import PROMOTE_INTERVAL
from supervisor.config import SupervisorConfig

SCALE_INTERVAL = 1.0  # seconds between pool-size decisions
CANCEL_INTERVAL = 1.0  # seconds between looks for cancel requests (SPEC: acted on within 2 s)


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


@dataclass
class LoopTimers:
    """The master's periodic work, made anew from the config at boot and on reload."""

    beat: Periodic  # heartbeats and throughput (heartbeat_interval)
    scale: Periodic  # pool sizes (SCALE_INTERVAL)
    poll: Periodic  # the poll, while a child is idle (poll_interval)
    promote: Periodic  # the poll in any case, so scheduled jobs fall due (PROMOTE_INTERVAL)
    cancel: Periodic  # cancel requests (CANCEL_INTERVAL)
    watchdog: Periodic | None  # systemd's watchdog, when the unit asks for one

    @classmethod
    def make(cls, sup: SupervisorConfig, now: float, watchdog: float | None) -> LoopTimers:
        return cls(
            beat=Periodic(sup.heartbeat_interval, now, first=0.0),
            scale=Periodic(SCALE_INTERVAL, now),
            poll=Periodic(sup.poll_interval, now, first=0.0),
            promote=Periodic(PROMOTE_INTERVAL, now, first=0.0),
            cancel=Periodic(CANCEL_INTERVAL, now),
            watchdog=Periodic(watchdog, now, first=0.0) if watchdog else None,
        )

    def poll_due(self, now: float, any_idle: bool) -> bool:
        """Every poll_interval while a child is idle, and every PROMOTE_INTERVAL in any
        case: scheduled jobs must become ready while every child is busy, too."""
        if (self.poll.due(now) and any_idle) or self.promote.due(now):
            self.promote = Periodic(PROMOTE_INTERVAL, now)
            return True
        return False

    def remaining(self, now: float, any_idle: bool) -> float:
        """Seconds until the next one is due (the poll timer counts only while a child idles)."""
        timers = [self.beat, self.scale, self.promote, self.cancel]
        if any_idle:
            timers.append(self.poll)
        return min(t.remaining(now) for t in timers)
