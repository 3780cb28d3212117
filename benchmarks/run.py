"""forkq benchmarks: `make bench` (or `.venv/bin/python benchmarks/run.py`).

Measures, on MariaDB/MySQL and on SQLite, what a user of forkq pays for it:

1. enqueue   `Queue.enqueue` (one commit each) against a raw driver INSERT loop, and
             `Queue.enqueue_many` in batches of 1,000;
2. drain     N no-op jobs worked off by the real daemon (`python -m supervisor run`)
             with one pool of W = 2 and W = 4 children, against raw-SQL loops
             (benchmarks/baseline.py: SKIP LOCKED, and seed 001's partition locks);
3. latency   enqueue → handler start on an idle daemon, 200 jobs 20 ms apart;
4. idle      queries per second an idle daemon sends (MariaDB per-user counters);
5. memory    master RSS and per-child USS after 10,000 jobs;
6. scale     claim + complete cost with 10k vs 1M finished rows, and the plan;
7. claims, tick, wake, silent, trickle: scheduled jobs, the check tick at 5M rows,
             same-host wake-up, the master with a silent database, issue 11's
             reproduction, on a private mariadbd (benchmarks/sections/, scale_env.py);
8. commands  a command handler's per-job overhead against the no-op Python handler.
9. galera, databases (MariaDB only, on private servers the sections start): a 3-node
             Galera writer against a standalone server and its failover; one database
             against two (issue 24).

Every figure is printed with its target and PASS/MISS; the whole run is bounded
(each section has a deadline, the daemon runs in its own session and its processes
are killed on any error) and writes benchmarks/RESULTS.md, keeping that file's
hand-written "## Profile" section. MariaDB comes from FORKQ_BENCH_MYSQL_URL
(default mysql://root@127.0.0.1:3306/forkq_bench): that database and a user
`forkq_bench` are created for the run and dropped after it.

    .venv/bin/python benchmarks/run.py                      # everything, both backends
    .venv/bin/python benchmarks/run.py --backends sqlite --sections drain,latency --no-write
    .venv/bin/python benchmarks/run.py --profile            # cProfile of a drain (master + children)

This file is the driver: the command line, the sections chosen, one backend after the
other within the time budget. Each section is a module of benchmarks/sections/ (the
registry in sections/__init__.py keeps their order, deadlines and RESULTS.md method
text); harness.py holds what a section is handed (figures, deadlines, the settings, the
daemon launcher, which is the tests' own), backends.py the databases, results.py the
table and RESULTS.md, lab.py the what-if drains and profiles.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
for entry in (str(REPO), str(BENCH_DIR)):
    if entry not in sys.path:
        sys.path.insert(0, entry)

import results  # noqa: E402
import sections  # noqa: E402
from backends import Backend, MySQLBackend, SQLiteBackend  # noqa: E402
from harness import DEFAULT_MYSQL_URL, Bench, Deadline, Figure, Report, Settings  # noqa: E402
from lab import PATCH_NAMES, lab  # noqa: E402

# seconds: both backends (measured: see README), plus the scale+ sections'
TOTAL_BUDGET = 2400.0 + sections.BUDGET


def run_backend(
    backend: Backend, report: Report, settings: Settings, selected: list[str], budget: Deadline
) -> None:
    print(f"\n== {backend.name} ==", flush=True)
    # The scale+ sections bring their own databases: alone, they leave the shared server be.
    shared = any(name not in sections.PRIVATE for name in selected)
    try:
        if shared:
            backend.setup()
    except Exception as exc:
        with contextlib.suppress(Exception):
            backend.teardown()
        report.add(
            Figure(
                backend.name,
                "setup",
                "database set-up",
                None,
                "",
                error=f"{type(exc).__name__}: {exc}",
            )
        )
        return
    try:
        if shared:
            report.machine.update(backend.server())
        with tempfile.TemporaryDirectory(prefix=f"forkq-bench-{backend.name}-") as tmp:
            bench = Bench(backend, report, settings, Path(tmp))
            for name in selected:
                limit = min(sections.SECTIONS[name], budget.remaining())
                if limit < 10:
                    report.add(
                        Figure(backend.name, name, "(skipped)", None, "", error="time budget spent")
                    )
                    continue
                started = time.monotonic()
                try:
                    sections.runner(bench, name)(Deadline(limit))
                except Exception as exc:
                    report.add(
                        Figure(
                            backend.name,
                            name,
                            "(section failed)",
                            None,
                            "",
                            error=f"{type(exc).__name__}: {exc}"[:300],
                        )
                    )
                    if shared:
                        with contextlib.suppress(Exception):
                            backend.reset()
                print(f"  -- {name}: {time.monotonic() - started:.1f}s", flush=True)
    finally:
        if shared:
            with contextlib.suppress(Exception):
                backend.teardown()
        sections.close()  # the private mariadbd of the scale+ sections, if one was started


# --- main -----------------------------------------------------------------------------------


def compile_bytecode() -> None:
    """Write forkq's and the handlers' bytecode, as a wheel install ships it.

    An editable install under PYTHONDONTWRITEBYTECODE=1 (set on these machines) never
    caches it, so every daemon launch would compile ~30 modules: ~95 ms of CPU that a
    production install does not spend, counted against forkq in every from-launch figure.
    """
    for directory in (REPO / "supervisor", BENCH_DIR):
        compileall.compile_dir(directory, quiet=1)


def main() -> int:
    parser = argparse.ArgumentParser(description="forkq benchmarks (see benchmarks/README.md)")
    parser.add_argument("--backends", default="mariadb,sqlite", help="mariadb,sqlite")
    parser.add_argument(
        "--sections",
        default=",".join(sections.SECTIONS),
        help=",".join(sections.SECTIONS)
        + "; "
        + ", ".join(f"{k} = {','.join(v)}" for k, v in sections.GROUPS.items()),
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for trying the script")
    parser.add_argument("--no-write", action="store_true", help="do not write RESULTS.md")
    parser.add_argument("--idle-window", type=float, help="seconds (default 31)")
    lab_help = parser.add_argument_group("the lab (instead of the benchmarks)")
    lab_help.add_argument(
        "--lab",
        metavar="SETS",
        help='what-if drains, e.g. "none;lease;lease,nossl" (patches: '
        + ", ".join(PATCH_NAMES)
        + ")",
    )
    lab_help.add_argument("--profile", action="store_true", help="cProfile master and children")
    lab_help.add_argument("--lab-backend", default="mariadb", choices=("mariadb", "sqlite"))
    lab_help.add_argument("--lab-jobs", type=int, default=5000)
    lab_help.add_argument("--lab-workers", default="4", help="e.g. 2,4")
    lab_help.add_argument("--lab-repeats", type=int, default=1)
    lab_help.add_argument("--profile-top", type=int, default=30)
    args = parser.parse_args()
    args.mysql_url = os.environ.get("FORKQ_BENCH_MYSQL_URL", DEFAULT_MYSQL_URL)
    compile_bytecode()
    if args.lab or args.profile:
        return lab(args)
    selected = [x for s in args.sections.split(",") if s for x in sections.GROUPS.get(s, [s])]
    unknown = [s for s in selected if s not in sections.SECTIONS]
    if unknown:
        parser.error(f"unknown sections {unknown}")
    settings = Settings.quick() if args.quick else Settings()
    if args.idle_window:
        settings.idle_window = args.idle_window
    started_at = dt.datetime.now(dt.UTC)
    started = time.monotonic()
    budget = Deadline(TOTAL_BUDGET)
    report = Report(machine=results.machine_info())
    report.machine["forkq source"] = results.source_version()
    report.machine["fsync (4 KiB fdatasync, median) at start"] = (
        f"{results.fsync_probe(Path(tempfile.gettempdir())):.2f} ms"
    )
    report.machine["load average at start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        "forkq benchmarks — " + ", ".join(f"{k}: {v}" for k, v in report.machine.items()),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="forkq-bench-sqlite-") as sqlite_dir:
        for name in args.backends.split(","):
            backend: Backend = (
                MySQLBackend(args.mysql_url)
                if name == "mariadb"
                else SQLiteBackend(Path(sqlite_dir))
            )
            run_backend(backend, report, settings, selected, budget)
    seconds = time.monotonic() - started
    report.machine["load average at end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results.print_table(report)
    print(f"\ntotal {seconds:.0f}s")
    if not args.no_write:
        results.write_results(report, started_at, seconds, sys.argv[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
