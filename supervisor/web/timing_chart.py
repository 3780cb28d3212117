"""The per-handler page's charts: duration (p50, p95) and failure rate of one handler per
minute, drawn as SVG on the server like the throughput chart (chart.py), and the table's
figures as text. Pure: it takes the rows (store.handler_series) and `now`."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from supervisor.timing import Stats, seconds_text
from supervisor.web.chart import HEIGHT, LEFT, MAX_BARS, PLOT_W, TOP, WIDTH, Tick, nice_ceiling
from supervisor.web.chart import x_ticks as time_ticks

PLOT_H = HEIGHT - TOP - 24


@dataclass(frozen=True)
class Point:
    x: float
    p50_y: float
    p95_y: float
    fail_y: float  # the top of its failure-rate bar
    fail_h: float
    width: float  # of its failure-rate bar
    title: str


@dataclass(frozen=True)
class TimingChart:
    width: int
    height: int
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    bucket_minutes: int
    points: list[Point]
    p50_line: str  # polyline points "x,y x,y ..."
    p95_line: str
    duration_ticks: list[Tick]
    rate_ticks: list[Tick]
    x_ticks: list[Tick]
    jobs: int


def timing_chart(rows: Iterable[tuple[float, Stats]], now: float, hours: int) -> TimingChart:
    """One point per bucket of minutes that had attempts: its p50 and p95 (lines, on a
    linear axis to the highest p95) and its failure rate (bars, on an axis to 100 %)."""
    minutes = hours * 60
    bucket = max(1, math.ceil(minutes / MAX_BARS))
    count = math.ceil(minutes / bucket)
    end = (math.floor(now / 60) + 1) * 60
    start = end - count * bucket * 60
    merged: dict[int, Stats] = {}
    for minute, stats in rows:
        index = int((minute - start) // (bucket * 60))
        if 0 <= index < count:
            merged.setdefault(index, Stats()).add(stats)
    p95s = [s.percentile(0.95) or 0.0 for s in merged.values()]
    top = nice_ceiling(max(p95s, default=0.0))
    base = TOP + PLOT_H
    slot = PLOT_W / count
    points = [_point(i, s, start, bucket, slot, top) for i, s in sorted(merged.items())]
    return TimingChart(
        WIDTH,
        HEIGHT,
        LEFT,
        LEFT + PLOT_W,
        TOP,
        base,
        bucket,
        points,
        " ".join(f"{p.x},{p.p50_y}" for p in points),
        " ".join(f"{p.x},{p.p95_y}" for p in points),
        [Tick(round(base - PLOT_H * k / 4, 2), seconds_text(top * k / 4)) for k in range(5)],
        [Tick(round(base - PLOT_H * k / 4, 2), f"{25 * k} %") for k in range(5)],
        time_ticks(start, end, hours, PLOT_W),
        sum(s.jobs for s in merged.values()),
    )


def _point(index: int, stats: Stats, start: float, bucket: int, slot: float, top: float) -> Point:
    base = TOP + PLOT_H
    p50, p95 = stats.percentile(0.5) or 0.0, stats.percentile(0.95) or 0.0
    rate_h = PLOT_H * stats.failure_rate
    moment = datetime.fromtimestamp(start + index * bucket * 60, UTC).strftime("%H:%M")
    span = f"{moment} UTC" if bucket == 1 else f"{bucket} min from {moment} UTC"
    title = (
        f"{span}: {stats.jobs} attempts, {stats.failed} failed ({stats.failure_rate:.0%}),"
        f" p50 {seconds_text(p50)}, p95 {seconds_text(p95)}"
    )
    return Point(
        x=round(LEFT + (index + 0.5) * slot, 2),
        p50_y=round(base - PLOT_H * p50 / top, 2),
        p95_y=round(base - PLOT_H * p95 / top, 2),
        fail_y=round(base - rate_h, 2),
        fail_h=round(rate_h, 2),
        width=round(max(slot * 0.8, 0.5), 2),
        title=title,
    )
