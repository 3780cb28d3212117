"""[limits] and Snooze with two and three real daemons on one database (both backends).

Every figure is taken from what the handlers themselves wrote (each appends `start` and
`end` lines with its job id, pid and time.time(): one host, one clock, the database's
too). The worst overlap and the
worst window of each run are printed as `limits-figure ...` lines (`pytest -s` shows
them)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

from daemon_util import Daemon, render_config, wait_check_ticks
from util import sql, wait_until

from supervisor import Queue
from supervisor.models import JobState
from supervisor.results import attempt_history
from supervisor.store import Store

Factory = Callable[..., Daemon]
QUEUE = "lim"
MODULE = "limithandlers"
SOURCE = '''\
"""Handlers of the [limits] daemon tests (written by tests/daemon/test_limits_daemons.py)."""

import os
import time

from supervisor import Snooze, handler


def note(path, *fields):
    line = ",".join(str(f) for f in fields) + "\\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one write on O_APPEND: lines never interleave
    finally:
        os.close(fd)


@handler("l.work", queue="lim")
def work(payload, job):
    note(payload["file"], "start", job.id, os.getpid(), f"{time.time():.6f}")
    time.sleep(float(payload.get("seconds", 0)))
    note(payload["file"], "end", job.id, os.getpid(), f"{time.time():.6f}")


@handler("l.snooze", queue="lim", max_snoozes=3)
def snooze(payload, job):
    """Snoozes its first `times` runs (counted in the file), then is done."""
    note(payload["file"], "run", job.id, job.attempts)
    with open(payload["file"]) as f:
        runs = sum(1 for line in f if line.startswith(f"run,{job.id},"))
    if runs <= payload["times"]:
        raise Snooze(0.05, "not yet")
'''


def start(daemons: Factory, count: int, workers: int, limits: str, **pool: object) -> list[Daemon]:
    """`count` daemons of `workers` children each on queue "lim", with `limits` (TOML)."""
    started = []
    for number in range(count):
        daemon = daemons(
            name=f"host{number + 1}",
            pools={QUEUE: {"workers": workers, "timeout": 30, **pool}},
            supervisor={"handlers": ["testhandlers", MODULE]},
        )
        daemon.write_module(MODULE, SOURCE)
        daemon.write_config(
            text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + limits
        )
        started.append(daemon.start())
    for daemon in started:
        daemon.wait_ready()
    return started


def runs(path: Path) -> list[tuple[int, int, float, float]]:
    """(job id, pid, start, end) of every finished run, from the handlers' own lines."""
    opened: dict[tuple[int, int], float] = {}
    done = []
    for line in path.read_text().splitlines() if path.exists() else []:
        kind, job, pid, when = line.split(",")
        key = (int(job), int(pid))
        if kind == "start":
            opened[key] = float(when)
        elif kind == "end" and key in opened:
            done.append((int(job), int(pid), opened.pop(key), float(when)))
    return sorted(done, key=lambda run: run[2])


def overlap(spans: list[tuple[float, float]]) -> int:
    """The most spans open at one instant (an end before a start at the same instant)."""
    events = sorted(
        [(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1])
    )
    worst = now = 0
    for _, step in events:
        now += step
        worst = max(worst, now)
    return worst


def most_in_window(times: list[float], period: float) -> int:
    """The most of `times` in any half-open span [t, t + period)."""
    times = sorted(times)
    return max(
        (sum(1 for u in times[i:] if u < t + period) for i, t in enumerate(times)), default=0
    )


def enqueue(queue: Queue, n: int, path: Path, seconds: float, **options: object) -> list[int]:
    return queue.enqueue_many(
        [
            {
                "handler": "l.work",
                "queue": QUEUE,  # this process has not registered l.work: name its queue
                "payload": {"file": str(path), "seconds": seconds},
                **options,
            }
        ]
        * n
    )


def test_three_daemons_never_run_more_than_the_concurrency(
    daemons: Factory, queue: Queue, tmp_path: Path, backend: str
) -> None:
    record = tmp_path / "runs.txt"
    limits = '\n[limits.api]\nhandlers = ["l.work"]\nconcurrency = 3\n'
    start(daemons, 3, 3, limits)  # nine workers on three hosts for three slots
    enqueue(queue, 40, record, 0.1)
    wait_until(lambda: len(runs(record)) == 40, timeout=90, message="40 jobs run")
    worst = overlap([(s, e) for _, _, s, e in runs(record)])
    print(f"limits-figure {backend} concurrency=3 3x3 workers: worst overlap {worst}")
    assert worst <= 3
    assert worst == 3  # and the limit is used


def test_each_key_has_its_own_slots_and_keys_run_in_parallel(
    daemons: Factory, queue: Queue, tmp_path: Path, backend: str
) -> None:
    record = tmp_path / "runs.txt"
    limits = '\n[limits.tenant]\nqueues = ["lim"]\nconcurrency = 1\nper_key = true\n'
    start(daemons, 2, 3, limits)
    keyed = {key: enqueue(queue, 4, record, 0.15, limit_key=key) for key in ("a", "b", "c")}
    wait_until(lambda: len(runs(record)) == 12, timeout=90, message="12 jobs run")
    done = runs(record)
    for key, ids in keyed.items():
        assert overlap([(s, e) for job, _, s, e in done if job in ids]) == 1, key
    together = overlap([(s, e) for _, _, s, e in done])
    print(
        f"limits-figure {backend} per_key concurrency=1, keys a b c: worst per key 1, together {together}"
    )
    assert together >= 2  # different keys ran at the same time


def test_starts_per_window_never_pass_the_rate(
    daemons: Factory, queue: Queue, store: Store, tmp_path: Path, backend: str
) -> None:
    """Claims count starts on the database clock, held jobs too, and a held job starts
    within half a slice of its claim or goes back (work/holds.py); the window reaches a
    slice past the period, so the handlers' own starts keep the rate over any second."""
    record = tmp_path / "runs.txt"
    limits = '\n[limits.api]\nqueues = ["lim"]\nrate = "4/1s"\n'
    start(daemons, 2, 2, limits, on_success="keep")
    ids = enqueue(queue, 16, record, 0.0)
    wait_until(lambda: len(runs(record)) == 16, timeout=90, message="16 jobs run")
    handler_starts = {job: s for job, _, s, _ in runs(record)}
    by_handlers = most_in_window(list(handler_starts.values()), 1.0)
    first = sorted(handler_starts.values())
    print(
        f"limits-figure {backend} rate=4/1s 2x2 workers: handlers {by_handlers} in any 1 s,"
        f" 16 starts over {first[-1] - first[0]:.2f} s"
    )
    assert sorted(handler_starts) == sorted(ids)
    assert by_handlers == 4  # reached, never passed

    def acknowledged() -> bool:
        return all((job := store.get_job(i)) and job.status == JobState.DONE for i in ids)

    wait_until(acknowledged, timeout=30, message="every job acknowledged done")


def test_a_sigkilled_workers_slot_comes_back(
    daemons: Factory, queue: Queue, store: Store, tmp_path: Path
) -> None:
    """The job holding the only slot dies with its worker (SIGKILL): the master settles
    it, the slot is free again, and the job waiting on it runs."""
    record = tmp_path / "runs.txt"
    limits = '\n[limits.one]\nhandlers = ["l.work"]\nconcurrency = 1\n'
    hosts = start(daemons, 2, 2, limits)
    [stuck] = enqueue(queue, 1, record, 60.0)
    holder = wait_until(
        lambda: next(
            (
                (h, pid)
                for h in hosts
                for pid, t in h.child_titles().items()
                if f" job {stuck} " in t
            ),
            None,
        ),
        timeout=20,
        message="the long job running",
    )
    [waiting] = enqueue(queue, 1, record, 0.0)
    assert not any(job == waiting for job, *_ in runs(record))
    os.kill(holder[1], signal.SIGKILL)
    wait_until(
        lambda: any(job == waiting for job, *_ in runs(record)), timeout=30, message="the slot back"
    )
    job = store.get_job(stuck)
    assert job is not None and job.status in (JobState.READY, JobState.SCHEDULED, JobState.RUNNING)
    assert job.attempts >= 1


def test_order_among_eligible_jobs_is_kept_across_hosts(
    daemons: Factory, queue: Queue, tmp_path: Path
) -> None:
    """With one slot across two hosts, jobs start one after the other in the claim order
    (priority, then enqueue order), whichever host takes each."""
    record = tmp_path / "runs.txt"
    limits = '\n[limits.one]\nqueues = ["lim"]\nconcurrency = 1\n'
    start(daemons, 2, 2, limits)
    [blocker] = enqueue(queue, 1, record, 0.5)
    wait_until(lambda: record.exists(), timeout=20, message="the first job running")
    low = enqueue(queue, 4, record, 0.02)
    high = enqueue(queue, 3, record, 0.02, priority=5)
    wait_until(lambda: len(runs(record)) == 8, timeout=60, message="8 jobs run")
    assert [job for job, *_ in runs(record)] == [blocker, *high, *low]


def test_snoozes_use_no_attempt_and_max_snoozes_ends_dead(
    daemons: Factory, queue: Queue, store: Store, tmp_path: Path, db_url: str
) -> None:
    record = tmp_path / "snoozes.txt"
    start(daemons, 2, 1, "", on_success="keep")
    patient = queue.enqueue(
        "l.snooze", {"file": str(record), "times": 2}, queue=QUEUE, max_attempts=1
    )
    endless = queue.enqueue(
        "l.snooze", {"file": str(record), "times": 99}, queue=QUEUE, max_attempts=1
    )

    def ended() -> bool:
        jobs = [store.get_job(patient), store.get_job(endless)]
        return all(j is not None and j.status in (JobState.DONE, JobState.DEAD) for j in jobs)

    wait_until(ended, timeout=60, message="both jobs to end")
    done, dead = store.get_job(patient), store.get_job(endless)
    assert done is not None and dead is not None
    assert (done.status, done.attempts, done.snoozes) == (JobState.DONE, 1, 2)
    assert (dead.status, dead.snoozes) == (JobState.DEAD, 3)
    assert dead.last_error is not None and "max_snoozes" in dead.last_error
    [last] = attempt_history(store, dead)  # its dead end is in its history, as a failure's
    assert (last.attempt, last.outcome, last.error) == (1, "dead", dead.last_error)
    assert last.started_at is not None and last.host is not None
    lines = record.read_text().splitlines()
    assert lines.count(f"run,{patient},1") == 3  # every run was its first attempt
    assert sql(db_url, "SELECT COUNT(*) FROM forkq_jobs WHERE attempts > 1") == [(0,)]


def test_jobs_parked_on_a_full_bucket_grow_no_pool_and_saturate_none(
    daemons: Factory, queue: Queue, store: Store, tmp_path: Path
) -> None:
    """More workers would not start a parked job sooner: a pool that may grow to four
    stays at one while its queue waits on a rate, and no `saturated` alert fires."""
    record = tmp_path / "runs.txt"
    limits = '\n[limits.api]\nqueues = ["lim"]\nrate = "2/30s"\n'
    alerts = "\n[alerts.defaults]\nsaturated_ticks = 1\n"
    [daemon] = start(daemons, 1, 1, limits + alerts, max_workers=4)
    enqueue(queue, 30, record, 0.0)
    wait_until(lambda: len(runs(record)) == 2, timeout=30, message="the rate's two jobs run")
    wait_check_ticks(store, 6)  # 0.5 s each: three scale decisions too (SCALE_INTERVAL, 1 s)
    assert daemon.events("pool_resized") == [], daemon.events("pool_resized")
    assert len(daemon.pool_children(QUEUE)) == 1
    firing = [k for k, row in store.load_alerts().items() if row["state"] == "firing"]
    assert not [key for key in firing if key.startswith("saturated:")], firing
    assert len(runs(record)) == 2  # the rate held: the rest wait parked
