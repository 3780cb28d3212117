"""A/B no-op drains of several checkouts of forkq, taken in turn in one run (the machine is
shared and noisy: only figures taken side by side compare).

    .venv/bin/python benchmarks/ab_drain.py --backend sqlite /tmp/old-checkout /work/main
    .venv/bin/python benchmarks/ab_drain.py --backend mariadb --rounds 5 A B C

Each round drains N `ab.noop` jobs once per checkout, in turn: a fresh SQLite file or
MariaDB database with that checkout's own schema (`python -m supervisor schema apply`),
N jobs enqueued by its own `Queue.enqueue_many`, then its `forkq run` with one pool of W
children (never recycled), timed from the first job gone with every child forked to the
last (the steady state:
no interpreter start or imports), and the CPU the master and its children used per job
over that same span (psutil, read at both ends). Prints each checkout's median rate and CPU per
job, and its ratio to the first checkout.

Each checkout's bytecode is written first, as a wheel install ships it.

With `--from-launch`, the children are recycled as SPEC's default says (every 1,000
jobs: a 10,000-job drain replaces each child about twice) and each drain is timed from
the daemon's launch to the last job gone, its CPU the whole daemon's (getrusage of the
exited daemon: every child it reaped counts).

With `--counts`, each drain also reports what noise cannot fake, per job over the same
span: the master's and the children's CPU apart, the children's voluntary context
switches (each wait: for the server, a wake-up) and their read/write system calls
(`/proc/PID/io`: a round trip to the database is one write and at least one read; the
log line is one more write), and on MariaDB the statements, transactions, rows and bytes
the server counted for the daemon's user (`INFORMATION_SCHEMA.USER_STATISTICS`, which it
turns on with `SET GLOBAL userstat = 1`, so the admin URL needs SUPER; a user
of the bench's own, so the shared server's other clients do not count), and the whole CPU
of the mariadbd on the admin URL's port when it runs here (MARIADBD_CPU: purge and
flushing too, and the poller's counts; meaningful on a quiet server). Then the paired
ratio of each round (this checkout ÷ the first, in the same round) with its spread.
"""

from __future__ import annotations

import argparse
import compileall
import os
import random
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HANDLERS = """
from supervisor import handler


@handler("ab.noop", queue="ab")
def noop(payload, job):
    return None
"""

ENQUEUE = """
import sys
from supervisor import Queue
import os
q = Queue(os.environ["AB_URL"])
n = int(sys.argv[1])
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


STAT_COLUMNS = (
    "SELECT_COMMANDS", "UPDATE_COMMANDS", "OTHER_COMMANDS", "COMMIT_TRANSACTIONS",
    "ROLLBACK_TRANSACTIONS", "ROWS_READ", "ROWS_SENT", "ROWS_UPDATED", "ROWS_DELETED",
    "ROWS_INSERTED", "BYTES_RECEIVED", "BYTES_SENT", "BUSY_TIME", "CPU_TIME",
)  # fmt: skip
AB_USER = "forkq_ab_user"


def tree_counters(pid: int) -> dict[int, tuple[float, int, int, int]]:
    """Per live process of the daemon: (CPU s, voluntary switches, syscr, syscw)."""
    import psutil

    master = psutil.Process(pid)
    out: dict[int, tuple[float, int, int, int]] = {}
    for process in [master, *master.children(recursive=True)]:
        try:
            with process.oneshot():
                times = process.cpu_times()
                switches = process.num_ctx_switches()
                io = process.io_counters()
        except psutil.Error:
            continue
        out[process.pid] = (times.user + times.system, switches.voluntary, io.read_count,
                            io.write_count)  # fmt: skip
    return out


def counter_delta(
    pid: int, before: dict[int, tuple[float, int, int, int]],
    after: dict[int, tuple[float, int, int, int]], jobs: int,
) -> dict[str, float]:  # fmt: skip
    """Per job: master CPU µs, children CPU µs, children's switches and system calls."""
    kids = [0.0, 0.0, 0.0, 0.0]
    master = 0.0
    for p, end in after.items():
        start = before.get(p)
        if start is None:
            continue  # a child forked inside the span (none is recycled): not counted
        if p == pid:
            master = end[0] - start[0]
            continue
        for i in range(4):
            kids[i] += end[i] - start[i]
    return {
        "master_us": master / jobs * 1e6, "child_us": kids[0] / jobs * 1e6,
        "switches": kids[1] / jobs, "syscr": kids[2] / jobs, "syscw": kids[3] / jobs,
    }  # fmt: skip


def admin_connection(url: str) -> Any:
    """A connection to the server of `url` (no database), autocommit."""
    import pymysql

    from supervisor.dburl import parse_database_url

    parsed = parse_database_url(url)
    return pymysql.connect(
        host=parsed.host, port=parsed.port or 3306, user=parsed.user,
        password=parsed.password or "", autocommit=True,
    )  # fmt: skip


def server_cpu(url: str) -> float:
    """CPU seconds so far of the local mariadbd listening on `url`'s port, every thread
    (purge and flushing too, which USER_STATISTICS does not count); 0 if none is local."""
    import psutil

    from supervisor.dburl import parse_database_url

    port = parse_database_url(url).port or 3306
    for process in psutil.process_iter(["name"]):
        if process.info["name"] != "mariadbd":
            continue
        try:
            if any(c.laddr.port == port and c.status == psutil.CONN_LISTEN
                   for c in process.net_connections(kind="tcp")):  # fmt: skip
                times = process.cpu_times()
                return float(times.user + times.system)
        except psutil.Error:
            continue
    return 0.0


def user_stats(url: str) -> dict[str, float]:
    conn = admin_connection(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                f"SELECT {', '.join(STAT_COLUMNS)} FROM INFORMATION_SCHEMA.USER_STATISTICS"
                " WHERE USER = %s", (AB_USER,),
            )  # fmt: skip
            row = cursor.fetchone()
    finally:
        conn.close()
    stats = dict(zip(STAT_COLUMNS, (float(v) for v in row or [0] * len(STAT_COLUMNS)), strict=True))
    stats["MARIADBD_CPU"] = server_cpu(url)
    return stats


class Poller:
    """Counts the jobs left, on one connection of its own: on MariaDB as the admin user,
    so the daemon user's counters (`--counts`) are the daemon's alone, and without a new
    login every 10 ms."""

    def __init__(self, url: str, admin_url: str) -> None:
        if url.startswith("sqlite"):
            self.sqlite: sqlite3.Connection | None = sqlite3.connect(
                url.split("sqlite:///", 1)[1], timeout=30
            )
            self.mysql: Any = None
        else:
            from supervisor.dburl import parse_database_url

            self.sqlite, self.mysql = None, admin_connection(admin_url)
            self.mysql.select_db(parse_database_url(url).database)

    def left(self) -> int:
        if self.sqlite is not None:
            return int(self.sqlite.execute("SELECT COUNT(*) FROM forkq_jobs").fetchone()[0])
        with self.mysql.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM forkq_jobs")
            row = cursor.fetchone()
            return int(row[0]) if row else 0

    def close(self) -> None:
        (self.sqlite or self.mysql).close()


def mysql_admin(url: str, statement: str) -> None:
    conn = admin_connection(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(statement)
    finally:
        conn.close()


def _traced_master(strace_pid: int) -> int:
    import psutil

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if children := psutil.Process(strace_pid).children():
            return children[0].pid
        time.sleep(0.01)
    raise RuntimeError("strace started no daemon")


def strace_counts(path: Path, n: int) -> dict[str, float]:
    """System calls per job from `strace -c`'s summary (whole run: start-up included)."""
    counts: dict[str, float] = {}
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[3].isdigit() and fields[-1] in TRACED:
            counts[f"sys_{fields[-1]}"] = int(fields[3]) / n
    return counts


TRACED = ("sendto", "recvfrom", "read", "write", "poll", "select", "futex")


def prepare(
    work: Path, checkout: Path, backend: str, mysql_url: str, n: int, workers: int,
    recycled: bool, extra: str = "",
) -> tuple[str, dict[str, str]]:  # fmt: skip
    """A database with `checkout`'s schema and N jobs its own Queue enqueued, and ab.toml:
    one pool of W children, recycled at SPEC's default or (the steady state, whose CPU is
    read live from the processes) never. The URL and the daemon's environment."""
    (work / "ab_handlers.py").write_text(HANDLERS)
    if backend == "sqlite":
        url = f"sqlite:///{work / 'ab.db'}"
    else:
        database = f"forkq_ab_{os.getpid()}"
        mysql_admin(mysql_url, f"DROP DATABASE IF EXISTS {database}")
        mysql_admin(mysql_url, f"CREATE DATABASE {database}")
        password = os.urandom(12).hex()
        mysql_admin(mysql_url, f"DROP USER IF EXISTS {AB_USER}@'127.0.0.1'")
        mysql_admin(mysql_url, f"CREATE USER {AB_USER}@'127.0.0.1' IDENTIFIED BY '{password}'")
        mysql_admin(mysql_url, f"GRANT ALL ON {database}.* TO {AB_USER}@'127.0.0.1'")
        from supervisor.dburl import parse_database_url

        port = parse_database_url(mysql_url).port or 3306  # the admin URL's server
        url = f"mysql://{AB_USER}:{password}@127.0.0.1:{port}/{database}"
    (work / "ab.toml").write_text(
        f'[database]\nurl = "{url}"\n[supervisor]\nhandlers = ["ab_handlers"]\n'
        f"check_interval = 10\nshutdown_timeout = 10\n"
        f"[pools.ab]\nworkers = {workers}\nmax_workers = {workers}\ntimeout = 60\n"
        + ("" if recycled else "max_jobs_per_child = 1000000\n")
        + extra
    )
    env = {
        **os.environ,
        "PYTHONPATH": f"{work}{os.pathsep}{checkout}",
        "FORKQ_LOG_FORMAT": "json",
        "AB_URL": url,
    }
    env.pop("FORKQ_DATABASE_URL", None)
    subprocess.run([*RUN, "schema", "apply", "-c", "ab.toml"], cwd=work, env=env, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    subprocess.run([sys.executable, "-c", ENQUEUE, str(n)], cwd=work, env=env, check=True)
    return url, env


RUN = [sys.executable, "-m", "supervisor"]


def drop_database(backend: str, mysql_url: str) -> None:
    if backend != "sqlite":
        mysql_admin(mysql_url, f"DROP DATABASE IF EXISTS forkq_ab_{os.getpid()}")
        mysql_admin(mysql_url, f"DROP USER IF EXISTS {AB_USER}@'127.0.0.1'")


def drain_from_launch(
    checkout: Path, backend: str, mysql_url: str, n: int, workers: int, extra: str = ""
) -> tuple[float, float, dict[str, float]]:
    """`--from-launch`: children recycled at max_jobs_per_child's default, timed from the
    launch to the last job gone, the CPU of the whole daemon (every child it reaped,
    recycled ones too: getrusage once it has exited). (jobs/s, CPU µs/job, counts/job.)"""
    with tempfile.TemporaryDirectory(prefix="ab-drain-") as tmp:
        work = Path(tmp)
        url, env = prepare(work, checkout, backend, mysql_url, n, workers, True, extra)
        poller = Poller(url, mysql_url)
        stats_first = user_stats(mysql_url) if backend != "sqlite" else {}
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        launched = time.perf_counter()
        with open(work / "daemon.log", "wb") as log:
            daemon = subprocess.Popen([*RUN, "run", "-c", "ab.toml"], cwd=work, env=env,
                                      stdout=log, stderr=log, start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while poller.left() and time.monotonic() < deadline:
                time.sleep(0.01)
            elapsed = time.perf_counter() - launched
            stats_last = user_stats(mysql_url) if backend != "sqlite" else {}
        finally:
            poller.close()
            os.kill(daemon.pid, signal.SIGTERM)
            daemon.wait(60)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime)
        counts = {key: (stats_last[key] - stats_first[key]) / n for key in stats_last}
        drop_database(backend, mysql_url)
        return n / elapsed, cpu / n * 1e6, counts


def drain_once(
    checkout: Path, backend: str, mysql_url: str, n: int, workers: int, strace: bool = False,
    extra: str = "",
) -> tuple[float, float, dict[str, float]]:  # fmt: skip
    """(jobs per second in the steady state, CPU µs per job, the counts per job)."""
    with tempfile.TemporaryDirectory(prefix="ab-drain-") as tmp:
        work = Path(tmp)
        url, env = prepare(work, checkout, backend, mysql_url, n, workers, False, extra)
        run = RUN
        # `--strace`: the daemon under `strace -f -c` (slower: its rate is not comparable)
        traced = ["strace", "-f", "-c", "-o", str(work / "strace.txt"), "-e",
                  "trace=" + ",".join(TRACED)] if strace else []  # fmt: skip
        with open(work / "daemon.log", "wb") as log:
            daemon = subprocess.Popen(
                [*traced, *run, "run", "-c", "ab.toml"], cwd=work, env=env, stdout=log, stderr=log,
                start_new_session=True,
            )  # fmt: skip
        try:
            master = daemon.pid if not strace else _traced_master(daemon.pid)
            first = last = None
            cpu_first = cpu_last = 0.0
            procs_first: dict[int, tuple[float, int, int, int]] = {}
            procs_last: dict[int, tuple[float, int, int, int]] = {}
            stats_first: dict[str, float] = {}
            stats_last: dict[str, float] = {}
            deadline = time.monotonic() + 300
            poller = Poller(url, mysql_url)
            while time.monotonic() < deadline:
                left = poller.left()
                now = time.perf_counter()
                if first is None and left < n:
                    procs_first = tree_counters(master)
                    # Every child forked (a late one's start-up is not the steady state)
                    if len(procs_first) == workers + 1:
                        first, cpu_first = (now, left), tree_cpu(master)
                        if backend != "sqlite":
                            stats_first = user_stats(mysql_url)
                if left == 0 and first is not None:
                    last, cpu_last = now, tree_cpu(master)
                    procs_last = tree_counters(master)
                    if backend != "sqlite":
                        stats_last = user_stats(mysql_url)
                    break
                time.sleep(0.01)
            poller.close()
            if first is None or last is None:
                raise RuntimeError(f"{checkout}: the drain did not finish")
            rate = first[1] / (last - first[0])
            steady_cpu = (cpu_last - cpu_first) / first[1] * 1e6
            counts = counter_delta(master, procs_first, procs_last, first[1])
            for key in stats_last:
                counts[key] = (stats_last[key] - stats_first[key]) / first[1]
        finally:
            os.kill(master, signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        if strace:
            counts.update(strace_counts(work / "strace.txt", n))
        handed_back = (work / "daemon.log").read_bytes().count(b'"jobs_handed_back"')
        if handed_back:
            print(f"  ({checkout}: {handed_back} hand-backs in this drain)", flush=True)
        drop_database(backend, mysql_url)
        return rate, steady_cpu, counts


def spread(values: list[float]) -> str:
    """Median [min-max] and, from 5 values up, a bootstrap 95% interval of the median."""
    values = sorted(values)
    text = f"{statistics.median(values):.3g} [{values[0]:.3g}-{values[-1]:.3g}]"
    if len(values) >= 5:
        draw = random.Random(20).choices
        medians = sorted(statistics.median(draw(values, k=len(values))) for _ in range(2000))
        text += f" CI95 {medians[50]:.3g}-{medians[1949]:.3g}"
    return text


def print_counts(
    results: dict[Path, list[tuple[float, float, dict[str, float]]]], first: Path
) -> None:
    """Each count's median per checkout, then each checkout ÷ the first, paired by round."""
    keys = list(results[first][0][2])
    print("\nper job, median [min-max] of the rounds:")
    for checkout, runs in results.items():
        print(f"  {checkout}:")
        for key in keys:
            print(f"    {key:24} {spread([c[key] for _, _, c in runs])}")
    for checkout, runs in results.items():
        if checkout == first:
            continue
        pairs = list(zip(results[first], runs, strict=True))
        print(f"\n{checkout} ÷ {first}, paired by round, median [min-max], CI95 of the median:")
        print(f"    {'rate':24} {spread([b[0] / a[0] for a, b in pairs])}")
        for key in keys:
            if all(a[2][key] for a, _ in pairs):
                print(f"    {key:24} {spread([b[2][key] / a[2][key] for a, b in pairs])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--backend", choices=("sqlite", "mariadb"), default="sqlite")
    parser.add_argument("--mysql-url", default="mysql://root@127.0.0.1:3306/forkq_ab")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--alternate", action="store_true",
                        help="every other round takes the checkouts in the reverse order")  # fmt: skip
    parser.add_argument("--strace", action="store_true",
                        help="run each daemon under strace -f -c: system calls per job")  # fmt: skip
    parser.add_argument("--from-launch", action="store_true",
                        help="children recycled as by default; timed and costed from launch")  # fmt: skip
    parser.add_argument("--config", default="", metavar="TOML",
                        help='more config for ab.toml, e.g. a [limits.NAME] on queue "ab"')  # fmt: skip
    parser.add_argument("--counts", action="store_true",
                        help="print the per-job counts of each drain and their paired ratios")  # fmt: skip
    args = parser.parse_args()
    results: dict[Path, list[tuple[float, float, dict[str, float]]]] = {
        c: [] for c in args.checkouts
    }
    if args.counts and args.backend == "mariadb":
        mysql_admin(args.mysql_url, "SET GLOBAL userstat = 1")  # else USER_STATISTICS stays 0
    for checkout in args.checkouts:
        # Bytecode as a wheel install ships it (run.py's compile_bytecode): under
        # PYTHONDONTWRITEBYTECODE=1 every launch would compile each module again.
        compileall.compile_dir(checkout / "supervisor", quiet=1)
    for round_ in range(args.rounds):
        # Every other round in the reverse order: what comes first in a round gains nothing
        for checkout in args.checkouts[:: -1 if args.alternate and round_ % 2 else 1]:
            if args.from_launch:
                rate, cpu, counts = drain_from_launch(
                    checkout, args.backend, args.mysql_url, args.jobs, args.workers, args.config
                )
            else:
                rate, cpu, counts = drain_once(
                    checkout, args.backend, args.mysql_url, args.jobs, args.workers,
                    args.strace, args.config,
                )  # fmt: skip
            results[checkout].append((rate, cpu, counts))
            print(
                f"round {round_ + 1} {checkout}: {rate:,.0f} jobs/s, {cpu:,.0f} µs CPU/job",
                flush=True,
            )
            if args.counts:
                print("  " + ", ".join(f"{k} {v:.3g}" for k, v in counts.items()), flush=True)
    base = statistics.median(r for r, _, _ in results[args.checkouts[0]])
    print(f"\n{args.backend}, W={args.workers}, {args.jobs:,} no-op jobs, median of {args.rounds}:")
    for checkout, runs in results.items():
        rate = statistics.median(r for r, _, _ in runs)
        cpu = statistics.median(c for _, c, _ in runs)
        print(f"  {checkout}: {rate:,.0f} jobs/s ({rate / base:.2f}x), {cpu:,.0f} µs CPU/job")
    if args.counts:
        print_counts(results, args.checkouts[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
