"""What a run shows: the table on the console and benchmarks/RESULTS.md (everything above
its hand-written "## Profile" section, which is kept), with the machine, the figures,
how each is measured (each section's METHOD, in the order of the sections), the query
plans and how to reproduce.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import os
import platform
import socket
import statistics
import subprocess
import time
from pathlib import Path

import psutil
import sections
from harness import BENCH_DIR, REPO, Report

RESULTS = BENCH_DIR / "RESULTS.md"
PROFILE_HEADING = "## Profile"


def machine_info() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "host": socket.gethostname(),
        "OS": platform.platform(),
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "RAM": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "Python": platform.python_version(),
        "PyMySQL": importlib.metadata.version("PyMySQL"),
    }


def fsync_probe(directory: Path, count: int = 100) -> float:
    """Median milliseconds of a 4 KiB write + fdatasync: what one durable commit costs here."""
    path = directory / "fsync.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    times = []
    try:
        for i in range(count):
            os.pwrite(fd, b"x" * 4096, (i % 16) * 4096)
            started = time.perf_counter()
            os.fdatasync(fd)
            times.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times) * 1000


def source_version() -> str:
    """The commit measured, and whether supervisor/ had uncommitted changes (read-only git)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "supervisor"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    return head + (f" + {len(dirty)} uncommitted file(s) under supervisor/" if dirty else "")


def print_table(report: Report) -> None:
    rows = [
        (f.backend, f.section, f.name, f.shown_value(), f.shown_target(), f.verdict)
        for f in report.figures
    ]
    header = ("backend", "section", "figure", "value", "target", "result")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    verdicts = [f.verdict for f in report.figures]
    print(
        f"\n{verdicts.count('PASS')} PASS, {verdicts.count('MISS')} MISS, {verdicts.count('ERROR')} ERROR"
    )


def write_results(report: Report, started: dt.datetime, seconds: float, argv: list[str]) -> None:
    kept = ""
    if RESULTS.exists():
        text = RESULTS.read_text(encoding="utf-8")
        if PROFILE_HEADING in text:
            kept = text[text.index(PROFILE_HEADING) :]
    if not kept:
        kept = f'{PROFILE_HEADING}\n\n(not written yet: see benchmarks/README.md, "Profiling")\n'
    out = [
        "# forkq benchmark results",
        "",
        "Written by `benchmarks/run.py` (everything above the Profile section; that section is",
        "hand-written and kept across runs). Targets come from the benchmark brief.",
        "",
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}, run took {seconds:.0f} s",
        "- Command: `make bench` (= `.venv/bin/python benchmarks/run.py"
        + (" " + " ".join(argv) if argv else "")
        + "`)",
    ]
    out += [f"- {k}: {v}" for k, v in report.machine.items()]
    out += [
        "",
        "## Figures",
        "",
        "| backend | section | figure | value | target | result | note |",
        "|---|---|---|---:|---|---|---|",
    ]
    for f in report.figures:
        out.append(
            f"| {f.backend} | {f.section} | {f.name} | {f.shown_value()} | {f.shown_target()} | {f.verdict} | {f.note.replace('|', '/')} |"
        )
    verdicts = [f.verdict for f in report.figures]
    out += [
        "",
        f"{verdicts.count('PASS')} PASS, {verdicts.count('MISS')} MISS, {verdicts.count('ERROR')} ERROR.",
        "",
    ]
    out += ["## How each figure is measured", "", *METHOD, ""]
    if report.notes:
        out += ["Notes from this run:", ""] + [f"- {n}" for n in report.notes] + [""]
    if report.plans:
        out += ["## Query plans", ""]
        for title, plan in report.plans.items():
            out += [f"### {title}", "", "```", plan, "```", ""]
    out += ["## Reproduce", "", *REPRODUCE, ""]
    RESULTS.write_text("\n".join(out) + "\n" + kept, encoding="utf-8")
    print(f"\nwrote {RESULTS.relative_to(REPO)}")


METHOD = sections.METHOD

REPRODUCE = [
    "```sh",
    "make bench                                   # = .venv/bin/python benchmarks/run.py",
    "FORKQ_BENCH_MYSQL_URL=mysql://root@127.0.0.1:3306/forkq_bench make bench",
    ".venv/bin/python benchmarks/run.py --backends mariadb --sections drain --no-write",
    ".venv/bin/python benchmarks/baseline.py --variant block --workers 4 --jobs 5000",
    ".venv/bin/python benchmarks/run.py --profile   # cProfile of master and children during a drain",
    "```",
    "",
    "The MariaDB user running the bench needs CREATE/DROP DATABASE, CREATE USER and SUPER (for"
    " `SET GLOBAL userstat`, restored afterwards).",
    "",
    *sections.REPRODUCE,
]
