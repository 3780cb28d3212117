"""A/B no-op drains of several checkouts of forkq, taken in turn in one run (the machine is
shared and noisy: only figures taken side by side compare).

    .venv/bin/python benchmarks/ab_drain.py --backend sqlite /tmp/old-checkout /work/main
    .venv/bin/python benchmarks/ab_drain.py --backend mariadb --rounds 5 A B C

Each round drains N `ab.noop` jobs once per checkout, in turn: a fresh SQLite file or
MariaDB database with that checkout's own schema (`python -m supervisor schema apply`),
N jobs enqueued by its own `Queue.enqueue_many`, then its `forkq run` with one pool of W
children (never recycled), timed from the first job gone to the last (the steady state:
no interpreter start or imports), and the CPU the master and its children used per job
over that same span (psutil, read at both ends). Prints each checkout's median rate and CPU per
job, and its ratio to the first checkout.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HANDLERS = """
from supervisor import handler


@handler("ab.noop", queue="ab")
def noop(payload, job):
    return None
"""

ENQUEUE = """
import sys
from supervisor import Queue
q = Queue(sys.argv[1])
n = int(sys.argv[2])
for start in range(0, n, 1000):
    q.enqueue_many([{"handler": "ab.noop", "payload": {"i": i}, "queue": "ab"}
                    for i in range(start, min(n, start + 1000))])
q.close()
"""


def tree_cpu(pid: int) -> float:
    """CPU seconds so far of the daemon: its master and every live child."""
    import psutil

    master = psutil.Process(pid)
    total = 0.0
    for process in [master, *master.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def count_left(url: str) -> int:
    if url.startswith("sqlite"):
        path = url.split("sqlite:///", 1)[1]
        with sqlite3.connect(path, timeout=30) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM forkq_jobs").fetchone()[0])
    import pymysql

    from supervisor.dburl import parse_database_url

    parsed = parse_database_url(url)
    conn = pymysql.connect(
        host=parsed.host, port=parsed.port or 3306, user=parsed.user,
        password=parsed.password or "", database=parsed.database, autocommit=True,
    )  # fmt: skip
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM forkq_jobs")
            row = cursor.fetchone()
            return int(row[0]) if row else 0
    finally:
        conn.close()


def mysql_admin(url: str, statement: str) -> None:
    import pymysql

    from supervisor.dburl import parse_database_url

    parsed = parse_database_url(url)
    conn = pymysql.connect(
        host=parsed.host, port=parsed.port or 3306, user=parsed.user,
        password=parsed.password or "", autocommit=True,
    )  # fmt: skip
    try:
        with conn.cursor() as cursor:
            cursor.execute(statement)
    finally:
        conn.close()


def drain_once(
    checkout: Path, backend: str, mysql_url: str, n: int, workers: int
) -> tuple[float, float]:
    """(jobs per second in the steady state, CPU µs per job) of one drain."""
    with tempfile.TemporaryDirectory(prefix="ab-drain-") as tmp:
        work = Path(tmp)
        (work / "ab_handlers.py").write_text(HANDLERS)
        if backend == "sqlite":
            url = f"sqlite:///{work / 'ab.db'}"
        else:
            database = f"forkq_ab_{os.getpid()}"
            mysql_admin(mysql_url, f"DROP DATABASE IF EXISTS {database}")
            mysql_admin(mysql_url, f"CREATE DATABASE {database}")
            url = mysql_url.rsplit("/", 1)[0] + "/" + database
        (work / "ab.toml").write_text(
            f'[database]\nurl = "{url}"\n[supervisor]\nhandlers = ["ab_handlers"]\n'
            f"check_interval = 10\nshutdown_timeout = 10\n"
            f"[pools.ab]\nworkers = {workers}\nmax_workers = {workers}\ntimeout = 60\n"
            "max_jobs_per_child = 1000000\n"  # no recycling: the steady-state CPU is read live
        )
        env = {
            **os.environ,
            "PYTHONPATH": f"{work}{os.pathsep}{checkout}",
            "FORKQ_LOG_FORMAT": "json",
        }
        env.pop("FORKQ_DATABASE_URL", None)
        run = [sys.executable, "-m", "supervisor"]
        subprocess.run([*run, "schema", "apply", "-c", "ab.toml"], cwd=work, env=env, check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        subprocess.run([sys.executable, "-c", ENQUEUE, url, str(n)], cwd=work, env=env, check=True)
        with open(work / "daemon.log", "wb") as log:
            daemon = subprocess.Popen(
                [*run, "run", "-c", "ab.toml"], cwd=work, env=env, stdout=log, stderr=log,
                start_new_session=True,
            )  # fmt: skip
        try:
            first = last = None
            cpu_first = cpu_last = 0.0
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                left = count_left(url)
                now = time.perf_counter()
                if first is None and left < n:
                    first, cpu_first = (now, left), tree_cpu(daemon.pid)
                if left == 0:
                    last, cpu_last = now, tree_cpu(daemon.pid)
                    break
                time.sleep(0.01)
            if first is None or last is None:
                raise RuntimeError(f"{checkout}: the drain did not finish")
            rate = first[1] / (last - first[0])
            steady_cpu = (cpu_last - cpu_first) / first[1] * 1e6
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        handed_back = (work / "daemon.log").read_bytes().count(b'"jobs_handed_back"')
        if handed_back:
            print(f"  ({checkout}: {handed_back} hand-backs in this drain)", flush=True)
        if backend != "sqlite":
            mysql_admin(mysql_url, f"DROP DATABASE IF EXISTS forkq_ab_{os.getpid()}")
        return rate, steady_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--backend", choices=("sqlite", "mariadb"), default="sqlite")
    parser.add_argument("--mysql-url", default="mysql://root@127.0.0.1:3306/forkq_ab")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[Path, list[tuple[float, float]]] = {c: [] for c in args.checkouts}
    for round_ in range(args.rounds):
        for checkout in args.checkouts:
            rate, cpu = drain_once(checkout, args.backend, args.mysql_url, args.jobs, args.workers)
            results[checkout].append((rate, cpu))
            print(
                f"round {round_ + 1} {checkout}: {rate:,.0f} jobs/s, {cpu:,.0f} µs CPU/job",
                flush=True,
            )
    base = statistics.median(r for r, _ in results[args.checkouts[0]])
    print(f"\n{args.backend}, W={args.workers}, {args.jobs:,} no-op jobs, median of {args.rounds}:")
    for checkout, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {checkout}: {rate:,.0f} jobs/s ({rate / base:.2f}x), {cpu:,.0f} µs CPU/job")
    return 0


if __name__ == "__main__":
    sys.exit(main())
