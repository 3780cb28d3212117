"""Section idle: the statements per second an idle daemon sends (MariaDB's per-user
counters of the daemon's own user), with 2 and 16 children."""

from __future__ import annotations

import time

from harness import Bench, BenchDaemon, Deadline, wait_for


def run(bench: Bench, deadline: Deadline) -> None:
    if bench.b.queries() is None:
        bench.fig("idle", "queries/s while idle", None, "", note="needs MariaDB's USER_STATISTICS")
        return
    for workers in bench.s.idle_children:
        bench.b.reset()
        with BenchDaemon(bench.workdir, bench.b.daemon_url, workers, f"idle-w{workers}") as daemon:
            daemon.start()
            wait_for(daemon.all_idle, deadline, f"{workers} idle children")
            time.sleep(2.0)  # boot settles: registrations, first chores tick
            before, t0 = bench.b.queries(), time.perf_counter()
            while time.perf_counter() - t0 < bench.s.idle_window:
                deadline.check("measuring idle queries")
                daemon.check_alive()
                time.sleep(0.2)
            after, t1 = bench.b.queries(), time.perf_counter()
        assert before is not None and after is not None
        bench.fig(
            "idle",
            f"queries/s, idle daemon, {workers} children",
            (after - before) / (t1 - t0),
            "q/s",
            target=("<=", 25.0),
            note=f"{after - before} statements in {t1 - t0:.1f}s",
        )
    bench.b.reset()


METHOD = [
    "- **idle**: MariaDB `SET GLOBAL userstat = 1`; the daemon connects as user `forkq_bench`;"
    " SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS of that user over the window, which"
    " starts once all children report idle plus 2 s. The window is 31 s, not 10 s: idle"
    " children re-check the queue on their own every 30 s (IDLE_RECHECK), and a shorter"
    " window would leave exactly the per-child share out.",
]
