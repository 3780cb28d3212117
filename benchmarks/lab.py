"""The lab (`run.py --lab SETS`, `--profile`): what-if drains with monkeypatches that behave
like a proposed change, and cProfile of the master and every child, to measure a change
before anyone makes it in supervisor/ (benchmarks/README.md, "The lab").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from backends import Backend, MySQLBackend, SQLiteBackend
from harness import Bench, Deadline, Figure, Report, Settings, _cost_note, _num
from sections import drain

# Runs `forkq` with cProfile in the master and each child (FORKQ_BENCH_PROFILE_DIR) and/or
# with what-if patches (FORKQ_BENCH_PATCHES), to measure a proposed change before anyone
# makes it in supervisor/. Each patch is the smallest monkeypatch that behaves like the
# proposal; see benchmarks/README.md.
LAB_WRAPPER = r"""
import cProfile, functools, os, sys, time
sys.argv = ["forkq"] + sys.argv[1:]
PROFILE_DIR = os.environ.get("FORKQ_BENCH_PROFILE_DIR", "")
PATCHES = set(filter(None, os.environ.get("FORKQ_BENCH_PATCHES", "").split(",")))
import supervisor.daemon.child as child
import supervisor.daemon.master as master
import supervisor.work.worker as worker

if "oldlease" in PATCHES:  # as in commit c4bbecb: every job extended every held lease
    def _ensure_lease_old(self, row):
        need = self.job_timeout(row) + worker.LEASE_MARGIN
        if time.monotonic() + need > self._lease_until:
            self.store.extend_leases(self.owner, [r.id for r in self.held], need)
            self._lease_until = time.monotonic() + need
    worker.Worker._ensure_lease = _ensure_lease_old

if "lease" in PATCHES:  # extend leases only when the lease would not outlive the job
    def _ensure_lease(self, row):
        timeout = self.job_timeout(row)
        if time.monotonic() + timeout + worker.LEASE_MARGIN / 2 > self._lease_until:
            need = timeout + worker.LEASE_MARGIN
            self.store.extend_leases(self.owner, [r.id for r in self.held], need)
            self._lease_until = time.monotonic() + need
    worker.Worker._ensure_lease = _ensure_lease

if PATCHES & {"claimidx", "noclaimidx"}:  # claim_select with / without the index hint
    from supervisor.store import mysql as _m, sqlite as _s
    for _q, _hint in ((_m.QUERIES, "FORCE INDEX (forkq_jobs_limit)"),
                      (_s.QUERIES, "INDEXED BY forkq_jobs_claim")):
        _q["claim_select"] = _q["claim_select"].replace(" " + _hint, "", 1)
        if "claimidx" in PATCHES:
            _q["claim_select"] = _q["claim_select"].replace(
                "FROM forkq_jobs", "FROM forkq_jobs " + _hint, 1)

if "nossl" in PATCHES:  # no TLS context per connection (the server has no TLS here anyway)
    import pymysql
    pymysql.connect = functools.partial(pymysql.connect, ssl_disabled=True)

if "quiet" in PATCHES:  # no per-job log line (measures what the line costs)
    import supervisor.logs as logs
    _setup = logs.setup
    logs.setup = lambda level="info", json_lines=None: _setup("warning", json_lines)

if "notitle" in PATCHES:  # no setproctitle per job
    child.set_title = lambda title: None

if PROFILE_DIR:
    def _profiled(func, kind):
        def run(*args, **kwargs):
            prof = cProfile.Profile()
            prof.enable()
            try:
                return func(*args, **kwargs)
            finally:
                prof.disable()
                prof.dump_stats(os.path.join(PROFILE_DIR, f"{kind}-{os.getpid()}.prof"))
        return run
    child.child_main = _profiled(child.child_main, "child")
    master.Master.run = _profiled(master.Master.run, "master")

from supervisor.cli.parser import main
raise SystemExit(main())
"""
PATCH_NAMES = ("oldlease", "lease", "claimidx", "noclaimidx", "nossl", "quiet", "notitle")


def lab(args: argparse.Namespace) -> int:
    """What-if drains (--lab "none;claimidx;claimidx,nossl") and cProfile runs (--profile).

    Repeats go round all patch sets in turn, so a noisy neighbour hits each set alike;
    the median run of each set is shown.
    """
    name = args.lab_backend
    backend: Backend = (
        MySQLBackend(args.mysql_url)
        if name == "mariadb"
        else SQLiteBackend(Path(tempfile.mkdtemp()))
    )
    patch_sets = [p.strip() for p in (args.lab or "none").split(";") if p.strip()]
    for patches in patch_sets:
        unknown = set(patches.split(",")) - {*PATCH_NAMES, "none"}
        if unknown:
            raise SystemExit(f"unknown patches {sorted(unknown)}; known: {', '.join(PATCH_NAMES)}")
    workers_list = [int(w) for w in args.lab_workers.split(",")]
    backend.setup()
    report = Report()
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="forkq-lab-") as tmp:
            workdir = Path(tmp)
            wrapper = workdir / "lab_forkq.py"
            wrapper.write_text(LAB_WRAPPER, encoding="utf-8")
            bench = Bench(backend, report, Settings(drain_jobs=args.lab_jobs), workdir)
            bench.daemon_command = [sys.executable, str(wrapper)]
            for i in range(args.lab_repeats):
                for patches in patch_sets:
                    for workers in workers_list:
                        env = {"FORKQ_BENCH_PATCHES": "" if patches == "none" else patches}
                        profile_dir = workdir / f"prof-{patches}-{workers}-{i}"
                        if args.profile:
                            profile_dir.mkdir()
                            env["FORKQ_BENCH_PROFILE_DIR"] = str(profile_dir)
                        bench.daemon_env = env
                        run = drain.forkq_drain(bench, workers, Deadline(300), f"lab-{workers}-{i}")
                        runs.setdefault((patches, workers), []).append(run)
                        print(f"  {patches} W={workers}: {run['rate']:,.0f} jobs/s", flush=True)
                        if args.profile:
                            print_profile(profile_dir, args.profile_top)
    finally:
        backend.teardown()
    for (patches, workers), series in runs.items():
        series.sort(key=lambda r: r["rate"])
        mid = series[len(series) // 2]
        tag = f"patches={patches}" + (" (cProfile on)" if args.profile else "")
        note = f"median of {len(series)}: " + ", ".join(_num(r["rate"]) for r in series)
        report.add(
            Figure(
                backend.name,
                "lab",
                f"{tag} W={workers}, daemon start",
                mid["rate"],
                "jobs/s",
                note=note,
            )
        )
        report.add(
            Figure(
                backend.name,
                "lab",
                f"{tag} W={workers}, steady state",
                mid["steady"],
                "jobs/s",
                note=_cost_note(mid),
            )
        )
    return 0


def print_profile(directory: Path, top: int) -> None:
    import pstats

    for kind in ("child", "master"):
        files = sorted(str(p) for p in directory.glob(f"{kind}-*.prof"))
        if not files:
            continue
        stats = pstats.Stats(*files)
        stats.strip_dirs()
        print(f"\n===== {kind} ({len(files)} process(es)): top by cumulative time =====")
        stats.sort_stats("cumulative").print_stats(top)
        print(f"\n===== {kind}: top by own time =====")
        stats.sort_stats("tottime").print_stats(top)
