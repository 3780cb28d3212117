"""The throughput chart: jobs done and failed per minute, drawn as SVG on the server.

No chart library and no script: the template draws the bars this module places, and
each bar's <title> is its tooltip. Pure: it takes the rows and `now`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from supervisor.models import Throughput

WIDTH = 960
HEIGHT = 220
LEFT, RIGHT, TOP, BOTTOM = 52, 8, 10, 24  # margins around the plot
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM  # the plot inside them
MAX_BARS = 360  # longer ranges add minutes into buckets
HOURS = (1, 3, 6, 12, 24)


@dataclass(frozen=True)
class Bar:
    x: float
    width: float
    done_y: float
    done_h: float
    failed_y: float
    failed_h: float
    title: str


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    bucket_minutes: int
    bars: list[Bar]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    done: int
    failed: int


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^k at or above `value` (the top of the y axis)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return float(next(step * power for step in (1, 2, 5, 10) if step * power >= value))


def throughput_chart(rows: Iterable[Throughput], now: float, hours: int) -> Chart:
    """Bars of done (below) and failed (on top), per minute averaged over each bucket."""
    minutes = hours * 60
    bucket = max(1, math.ceil(minutes / MAX_BARS))
    count = math.ceil(minutes / bucket)
    end = (math.floor(now / 60) + 1) * 60  # the end of the current minute
    start = end - count * bucket * 60
    done, failed = _bucket_counts(rows, start, bucket, count)
    rates = [(d / bucket, f / bucket) for d, f in zip(done, failed, strict=True)]
    top = nice_ceiling(max((d + f for d, f in rates), default=0.0))
    base = TOP + PLOT_H
    y_ticks = [Tick(round(base - PLOT_H * k / 4, 2), _number(top * k / 4)) for k in range(5)]
    return Chart(
        WIDTH,
        HEIGHT,
        LEFT,
        WIDTH - RIGHT,
        TOP,
        base,
        bucket,
        _bars(start, bucket, done, failed, top),
        y_ticks,
        x_ticks(start, end, hours, PLOT_W),
        sum(done),
        sum(failed),
    )


def _bucket_counts(
    rows: Iterable[Throughput], start: float, bucket: int, count: int
) -> tuple[list[int], list[int]]:
    """Jobs done and failed per bucket of `bucket` minutes from `start`; rows outside
    the range are left out."""
    done = [0] * count
    failed = [0] * count
    for row in rows:
        index = int((row.minute - start) // (bucket * 60))
        if 0 <= index < count:
            done[index] += row.done
            failed[index] += row.failed
    return done, failed


def _bars(start: float, bucket: int, done: list[int], failed: list[int], top: float) -> list[Bar]:
    """One bar per bucket that has jobs, its height the per-minute rate on a y axis to `top`."""
    slot = PLOT_W / len(done)
    scale = PLOT_H / top
    base = TOP + PLOT_H
    bars = []
    for i, (d, f) in enumerate((d / bucket, f / bucket) for d, f in zip(done, failed, strict=True)):
        if not d and not f:
            continue
        x = LEFT + i * slot
        done_h, failed_h = d * scale, f * scale
        bars.append(
            Bar(
                x=round(x + slot * 0.1, 2),
                width=round(max(slot * 0.8, 0.5), 2),
                done_y=round(base - done_h, 2),
                done_h=round(done_h, 2),
                failed_y=round(base - done_h - failed_h, 2),
                failed_h=round(failed_h, 2),
                title=_title(start + i * bucket * 60, bucket, done[i], failed[i]),
            )
        )
    return bars


def x_ticks(start: float, end: float, hours: int, plot_w: int) -> list[Tick]:
    """A label every 15 minutes for an hour, every hour or more for longer ranges."""
    step = 15 * 60 if hours <= 1 else 30 * 60 if hours <= 3 else 3600 * max(1, hours // 6)
    first = math.ceil(start / step) * step
    ticks = []
    at = first
    while at < end:
        x = LEFT + (at - start) / (end - start) * plot_w
        ticks.append(Tick(round(x, 2), datetime.fromtimestamp(at, UTC).strftime("%H:%M")))
        at += step
    return ticks


def _title(at: float, bucket: int, done: int, failed: int) -> str:
    moment = datetime.fromtimestamp(at, UTC).strftime("%H:%M")
    span = f"{moment} UTC" if bucket == 1 else f"{bucket} min from {moment} UTC"
    return f"{span}: {done} done, {failed} failed"


def _number(value: float) -> str:
    return f"{value:g}" if value < 1000 else f"{value / 1000:g}k"
