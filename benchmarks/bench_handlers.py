"""Handlers the benchmark daemon loads (`handlers = ["bench_handlers"]`, PYTHONPATH=benchmarks).

`bench.noop` measures the queue's own cost: it does nothing. `bench.stamp` records
when a job started, as `job_id epoch_seconds` lines appended to the file named by
FORKQ_BENCH_STAMP_FILE; one `write` on an O_APPEND descriptor per line, so lines from
several children never interleave. The bench process compares these wall-clock
stamps with the times it recorded when it enqueued (same host, same clock).
"""

from __future__ import annotations

import os
import time
from typing import Any

from supervisor import handler

QUEUE = "bench"
STAMP_FILE_ENV = "FORKQ_BENCH_STAMP_FILE"


@handler("bench.noop", queue=QUEUE)
def noop(payload: Any, job: Any) -> None:
    """Nothing: what is left is forkq's claim, bookkeeping and ack."""


@handler("bench.stamp", queue=QUEUE)
def stamp(payload: Any, job: Any) -> None:
    """Append `job.id time.time()` to the stamp file, first thing."""
    now = time.time()
    fd = os.open(os.environ[STAMP_FILE_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.id} {now:.6f}\n".encode())
    finally:
        os.close(fd)


@handler("bench.work", queue=QUEUE)
def work(payload: Any, job: Any) -> None:
    """Real work of a set length: sleep payload["s"] seconds (a call to another service),
    then append `job_id start end pid` to the stamp file, start being the first act."""
    start = time.time()
    time.sleep(float(payload.get("s", 0)))
    end = time.time()
    fd = os.open(os.environ[STAMP_FILE_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{job.id} {start:.6f} {end:.6f} {os.getpid()}\n".encode())
    finally:
        os.close(fd)
