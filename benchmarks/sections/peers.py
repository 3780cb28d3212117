"""Section peers (issue 28 item 3): forkq's no-op drain against the hand-written loop and
other queues, W = 4, in one run, rounds taken in turn.

MariaDB: forkq's daemon, the raw SKIP LOCKED batch loop (baseline.py, run as a program
of its own; 20 a claim as issue 28 ran it, and 100 a claim as forkq's claim_batch allows
for jobs this quick), dramatiq and rq on a redis-server the section starts on a loopback
port of its own. SQLite: forkq, the raw SQLite loop (20 and 100 a claim), huey's
SqliteHuey. Each drain starts once InnoDB has purged what the one before left
(drain.SETTLED); the local mariadbd's whole CPU a job is read beside the statements'.
Every contender is launched after its N jobs are in, and timed by one poller of what is
left: from launch
(interpreter, imports, forks, connect) and in the steady state (95% → 5% left). Client
CPU is every process of the contender, waited for (getrusage); per job the statements
the database counted, or the commands Redis counted.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
from backends import MySQLBackend
from harness import BENCH_DIR, POLL, Bench, Deadline, _children_cpu, _per_job, _rates
from util import dies_with_us

from sections.drain import baseline_program, forkq_drain

WORKERS = 4
JOBS = 10_000
BIG_BATCH = 100  # claim_batch's default: the loop's second run claims as many
THREADS = 8  # dramatiq's default threads per process (issue 28 ran it so)
REDIS_SERVER = "/usr/bin/redis-server"
# Issue 28 item 3: at least the hand-written loop at 20 a claim, ahead of every Redis
# peer, 3x huey on SQLite (the loops at 100 a claim and the SQLite loop are for scale)
TARGETS = {"SKIP LOCKED loop": 1.0, "dramatiq/Redis": 1.0, "rq/Redis": 1.0, "huey/SQLite": 3.0}


def run(bench: Bench, deadline: Deadline) -> None:
    try:
        import dramatiq  # noqa: F401
        import huey  # noqa: F401
        import redis  # noqa: F401
        import rq  # noqa: F401
    except ImportError as exc:
        bench.fig(
            "peers",
            "(not run)",
            None,
            "",
            error=f"{exc}: pip install -e '.[bench]' (make bench does)",
        )
        return
    if isinstance(bench.b, MySQLBackend) and not Path(REDIS_SERVER).exists():
        bench.fig(
            "peers", "(not run)", None, "", error=f"no {REDIS_SERVER}: apt-get install redis-server"
        )
        return
    n = 2000 if bench.s.is_quick else JOBS
    rounds = bench.s.drain_repeats
    saved = bench.s.drain_jobs
    bench.s.drain_jobs = n
    try:
        if isinstance(bench.b, MySQLBackend):
            with redis_server(bench.workdir) as redis_url:
                contenders = {
                    "forkq": lambda: with_server_cpu(
                        bench, lambda: forkq_drain(bench, WORKERS, deadline, "peers"), n
                    ),
                    "SKIP LOCKED loop": lambda: with_server_cpu(
                        bench, lambda: loop(bench, "skip_locked", deadline), n
                    ),
                    # forkq claims up to claim_batch (100) of jobs this quick: the loop so
                    # too, to show what of the lead is the batch size
                    "SKIP LOCKED loop, 100 a claim": lambda: with_server_cpu(
                        bench, lambda: loop(bench, "skip_locked", deadline, BIG_BATCH), n
                    ),
                    "dramatiq/Redis": lambda: dramatiq_drain(bench, redis_url, n, deadline),
                    "rq/Redis": lambda: rq_drain(bench, redis_url, n, deadline),
                }
                compare(bench, contenders, rounds, n)
        else:
            contenders = {
                "forkq": lambda: forkq_drain(bench, WORKERS, deadline, "peers"),
                "SQLite loop": lambda: loop(bench, "sqlite", deadline),
                "SQLite loop, 100 a claim": lambda: loop(bench, "sqlite", deadline, BIG_BATCH),
                "huey/SQLite": lambda: huey_drain(bench, n, deadline),
            }
            compare(bench, contenders, rounds, n)
    finally:
        bench.s.drain_jobs = saved
        for name in ("FORKQ_PEER", "FORKQ_PEER_REDIS", "FORKQ_PEER_HUEY_DB"):
            os.environ.pop(name, None)
        bench.b.reset()


def compare(
    bench: Bench, contenders: dict[str, Callable[[], dict[str, float]]], rounds: int, n: int
) -> None:
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, drain in contenders.items():
            runs[name].append(drain())
    ours = runs["forkq"]
    for name, series in runs.items():
        steady = [r["steady"] for r in series]
        launch = [r["rate"] for r in series]
        cpu = statistics.median(r["client_cpu_us_per_job"] for r in series)
        per_job = [
            r[k] for r in series for k in ("statements_per_job", "commands_per_job") if k in r
        ]
        note = (
            f"{rounds} rounds, n={n:,}, W={WORKERS}; steady {min(steady):,.0f}-{max(steady):,.0f}"
            f"; from launch {statistics.median(launch):,.0f} jobs/s; client CPU {cpu:.0f} µs/job"
        )
        if per_job:
            what = "statements" if "statements_per_job" in series[0] else "Redis commands"
            note += f", {statistics.median(per_job):.2f} {what}/job"
        if "server_cpu_us_per_job" in series[0]:
            server = statistics.median(r["server_cpu_us_per_job"] for r in series)
            note += f", server CPU {server:.0f} µs/job"
        if "mariadbd_cpu_us_per_job" in series[0]:
            whole = statistics.median(r["mariadbd_cpu_us_per_job"] for r in series)
            threads = statistics.median(r.get("cpu_us_per_job", 0.0) for r in series)
            note += f", mariadbd CPU {whole:.0f} µs/job ({threads:.0f} in its statements)"
        bench.fig(
            "peers", f"{name}: no-op drain, steady", statistics.median(steady), "jobs/s", note=note
        )
        if name != "forkq":
            ratios = [a["steady"] / b["steady"] for a, b in zip(ours, series, strict=True)]
            bench.fig(
                "peers",
                f"forkq ÷ {name}, steady rate (median of rounds)",
                statistics.median(ratios),
                "x",
                target=(">=", TARGETS[name]) if name in TARGETS else None,
                note="rounds " + ", ".join(f"{r:.2f}" for r in ratios),
            )


def loop(bench: Bench, variant: str, deadline: Deadline, batch: int = 20) -> dict[str, float]:
    before = bench.b.counters()
    out = baseline_program(bench, variant, WORKERS, deadline, batch)
    out.update(_per_job(before, bench.b.counters(), bench.s.drain_jobs))
    return out


def with_server_cpu(
    bench: Bench, drain: Callable[[], dict[str, float]], n: int
) -> dict[str, float]:
    """The drain, with the whole CPU (every thread: purge, flushing) per job of the local
    mariadbd that listens on the bench's port (not a private one another section started);
    the server is shared, so this is meaningful on a quiet machine only."""
    assert isinstance(bench.b, MySQLBackend)
    server = _local_server(bench.b.url.port or 3306)
    if server is None:
        return drain()
    before = server.cpu_times()
    out = drain()
    after = server.cpu_times()
    spent = (after.user - before.user) + (after.system - before.system)
    out["mariadbd_cpu_us_per_job"] = spent / n * 1e6
    return out


def _local_server(port: int) -> psutil.Process | None:
    for process in psutil.process_iter(["name"]):
        if process.info["name"] != "mariadbd":
            continue
        with contextlib.suppress(psutil.Error):
            if any(
                c.laddr.port == port and c.status == psutil.CONN_LISTEN
                for c in process.net_connections(kind="tcp")
            ):
                return process
    return None


# --- Redis peers ----------------------------------------------------------------------------


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A redis-server of the section's own on a free loopback port, AOF with fsync every
    second (Redis's durable default), stopped at the end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = workdir / "redis"
    data.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
         "--save", "", "--appendonly", "yes", "--appendfsync", "everysec"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=dies_with_us(signal.SIGTERM),  # the bench killed: no redis left behind
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    try:
        import redis

        client = redis.Redis.from_url(url)
        end = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > end or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        client.close()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(data, ignore_errors=True)


def _redis_stats(client: Any) -> tuple[float, float]:
    """(commands processed, server CPU seconds) so far."""
    stats, cpu = client.info("stats"), client.info("cpu")
    return float(stats["total_commands_processed"]), cpu["used_cpu_sys"] + cpu["used_cpu_user"]


def _peer_env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(BENCH_DIR), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, **extra}


def timed_drain(
    launch: Callable[[], list[subprocess.Popen[bytes]]],
    left: Callable[[], int],
    n: int,
    deadline: Deadline,
    what: str,
    stop: bool,
) -> dict[str, float]:
    """Launch the contender's processes, poll what is left until 0, then stop them (or
    wait for them to exit, `stop=False`), and count their CPU."""
    cpu_before = _children_cpu()
    timeline: list[tuple[float, int]] = []
    started = time.perf_counter()
    procs = launch()
    try:
        while True:
            count = left()
            timeline.append((time.perf_counter(), count))
            if count == 0:
                break
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError(f"{what} exited early")
            deadline.check(what)
            time.sleep(POLL)
    finally:
        for p in procs:
            if stop and p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    out = _rates(timeline, started, n)
    out["client_cpu_us_per_job"] = (_children_cpu() - cpu_before) / n * 1e6
    return out


def dramatiq_drain(bench: Bench, url: str, n: int, deadline: Deadline) -> dict[str, float]:
    """dramatiq 2 (RedisBroker): 4 worker processes of 8 threads each, its default."""
    import redis

    env = _peer_env(FORKQ_PEER="dramatiq", FORKQ_PEER_REDIS=url)
    client = redis.Redis.from_url(url)
    client.flushdb()
    os.environ.update(FORKQ_PEER="dramatiq", FORKQ_PEER_REDIS=url)  # read at its import
    peer_tasks = importlib.reload(importlib.import_module("peer_tasks"))
    for _ in range(n):
        peer_tasks.noop_actor.send()
    commands, server = _redis_stats(client)
    dramatiq = str(Path(sys.executable).parent / "dramatiq")
    out = timed_drain(
        lambda: [
            subprocess.Popen(
                [dramatiq, "peer_tasks", "--processes", str(WORKERS), "--threads", str(THREADS)],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=dies_with_us(signal.SIGTERM),
            )
        ],
        lambda: int(client.hlen("dramatiq:default.msgs")),
        n,
        deadline,
        "dramatiq drain",
        stop=True,
    )
    commands_after, server_after = _redis_stats(client)
    out["commands_per_job"] = (commands_after - commands - 1) / n
    out["server_cpu_us_per_job"] = (server_after - server) / n * 1e6
    client.close()
    return out


def rq_drain(bench: Bench, url: str, n: int, deadline: Deadline) -> dict[str, float]:
    """rq 3: 4 burst workers of the SimpleWorker class (a job runs in the worker itself;
    rq's default forks a process per job)."""
    import redis
    from rq import Queue as RQueue

    client = redis.Redis.from_url(url)
    client.flushdb()
    queue = RQueue("default", connection=client)
    for start in range(0, n, 1000):
        queue.enqueue_many(
            [
                RQueue.prepare_data("peer_tasks.noop", result_ttl=0, ttl=None)
                for _ in range(start, min(n, start + 1000))
            ]
        )
    commands, server = _redis_stats(client)
    rq = str(Path(sys.executable).parent / "rq")
    command = [rq, "worker", "--burst", "--url", url, "-w", "rq.worker.SimpleWorker", "default"]
    env = _peer_env(FORKQ_PEER="rq")
    out = timed_drain(
        lambda: [
            subprocess.Popen(
                command,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=dies_with_us(signal.SIGTERM),
            )
            for _ in range(WORKERS)
        ],
        lambda: queue.count + queue.started_job_registry.count,
        n,
        deadline,
        "rq drain",
        stop=False,  # burst workers leave when the queue is empty
    )
    commands_after, server_after = _redis_stats(client)
    out["commands_per_job"] = (commands_after - commands) / n
    out["server_cpu_us_per_job"] = (server_after - server) / n * 1e6
    client.close()
    return out


# --- huey on SQLite --------------------------------------------------------------------------


def huey_drain(bench: Bench, n: int, deadline: Deadline) -> dict[str, float]:
    """huey 3 (SqliteHuey, its own file beside forkq's): the consumer with 4 worker
    processes (`-w 4 -k process`)."""
    path = bench.workdir / "huey.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.environ.update(FORKQ_PEER="huey", FORKQ_PEER_HUEY_DB=str(path))  # read at its import
    peer_tasks = importlib.reload(importlib.import_module("peer_tasks"))
    for _ in range(n):
        peer_tasks.noop_task()
    consumer = str(Path(sys.executable).parent / "huey_consumer")
    env = _peer_env(FORKQ_PEER="huey", FORKQ_PEER_HUEY_DB=str(path))
    huey = peer_tasks.huey
    return timed_drain(
        lambda: [
            subprocess.Popen(
                [consumer, "peer_tasks.huey", "-w", str(WORKERS), "-k", "process", "-q"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=dies_with_us(signal.SIGTERM),
            )
        ],
        lambda: int(huey.pending_count()),
        n,
        deadline,
        "huey drain",
        stop=True,
    )


METHOD = [
    "- **peers** (issue 28 item 3): 10,000 no-op jobs, W = 4, three rounds taken in turn in"
    " one run. MariaDB: forkq's daemon; the hand-written SKIP LOCKED loop (baseline.py,"
    " batches of 20, run as a program of its own); dramatiq 2.2 (RedisBroker, `--processes 4"
    " --threads 8`, its default) and rq 3.0 (four `rq worker --burst` of the SimpleWorker class) on a"
    " redis-server 7 the section starts on a loopback port of its own (AOF, fsync every"
    " second). SQLite: forkq, the raw SQLite loop, huey 3.5 (SqliteHuey, `huey_consumer -w 4"
    " -k process`). Each is launched after its jobs are in and timed by one poller of what is"
    " left; the figure is the steady rate (95% → 5% left) and forkq's ratio to each, round by"
    " round. Client CPU is getrusage of every process of the contender, per job; statements"
    " per job from MariaDB's counters, commands per job from Redis's INFO. Targets (issue 28):"
    " the median ratio at least 1x the loop at 20 a claim, dramatiq and rq, 3x huey.",
]
