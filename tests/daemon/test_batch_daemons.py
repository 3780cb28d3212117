"""Batches under real daemons (both backends): 200 jobs of one batch finishing across two
daemons settle it once, each callback enqueued and run exactly once; a batch with a dead
job fires on_dead and on_complete, never on_success. Deadlocks and lock waits of the
server during the run are reported (printed and kept as test properties)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from batch_util import callback_runs, lock_counters, report_locks, with_batch_handlers
from daemon_util import Daemon
from util import wait_until

from supervisor import Queue
from supervisor.config import PoolConfig
from supervisor.store import Store
from supervisor.store.batches import TAIL_OPEN

POOLS = {"default": {"workers": 3}}


def test_200_jobs_of_a_batch_across_two_daemons_fire_each_callback_once(
    daemons: Callable[..., Daemon],
    queue: Queue,
    store: Store,
    tmp_path: Path,
    db_url: str,
    record_property: Callable[[str, Any], None],
) -> None:
    calls, runs = tmp_path / "callbacks.txt", tmp_path / "runs.txt"
    first = with_batch_handlers(daemons(name="one", pools=POOLS))
    second = with_batch_handlers(daemons(name="two", pools=POOLS))
    first.start()
    second.start()
    first.wait_ready()
    second.wait_ready()
    before = lock_counters(db_url)
    payload = {"file": str(calls)}
    with queue.batch(on_success="b.callback", on_complete="b.callback", on_dead="b.callback",
                     payload=payload) as ok:  # fmt: skip
        ok.enqueue_many([{"handler": "t.record", "payload": {"file": str(runs)}}] * 200)
    with queue.batch(on_success="b.callback", on_complete="b.callback", on_dead="b.callback",
                     payload=payload) as bad:  # fmt: skip
        bad.enqueue_many([{"handler": "t.record", "payload": {"file": str(runs)}}] * 20)
        bad.enqueue("t.fail", max_attempts=1)
    assert ok.id is not None and bad.id is not None
    wait_until(lambda: len(callback_runs(calls)) >= 4, timeout=60, message="callbacks ran")
    wait_until(lambda: all(store.get_job(i) is None for s in (ok, bad)
                           for i in (queue.batch_status(s.id or 0).fired.values())),  # type: ignore[union-attr]
               timeout=30, message="callback jobs done")  # fmt: skip
    record_property("lock_counters", report_locks(db_url, before, "200-job batch, two daemons"))
    seen = Counter((event, batch) for event, batch, *_ in callback_runs(calls))
    assert seen == {("complete", ok.id): 1, ("success", ok.id): 1,
                    ("complete", bad.id): 1, ("dead", bad.id): 1}  # fmt: skip
    ok_status, bad_status = queue.batch_status(ok.id), queue.batch_status(bad.id)
    assert ok_status is not None and bad_status is not None
    assert (ok_status.total, ok_status.done, ok_status.dead, ok_status.pending) == (200, 200, 0, 0)
    assert (bad_status.total, bad_status.done, bad_status.dead) == (21, 20, 1)
    # Each callback run is the job the settle enqueued: one job per event, run once.
    fired = {(e, ok.id): i for e, i in ok_status.fired.items()}
    fired |= {(e, bad.id): i for e, i in bad_status.fired.items()}
    assert {(e, b): j for e, b, j, *_ in callback_runs(calls)} == fired
    assert len(runs.read_text().splitlines()) == 220  # every job of both batches ran once
    pids = {line.split(",")[1] for line in runs.read_text().splitlines()}
    assert len(pids) > 1  # the jobs ran in several children
    # The finishing transactions settled both batches: the chore (the backstop) had none
    # left. Six children end at most 6 x 20 of the last jobs in concurrent transactions
    # (under TAIL_OPEN: the last to commit locks, recounts and settles). A master that wrote
    # a busy child's successes (a hand-back, on a loaded machine) has no hook: the chore's.
    most_ending_at_once = 2 * POOLS["default"]["workers"] * PoolConfig(name="default").claim_batch
    assert most_ending_at_once <= TAIL_OPEN
    masters_wrote = [
        e for d in (first, second) for e in d.events("jobs_handed_back") if e.get("acknowledged")
    ]
    chores = [e for d in (first, second) for e in d.events("chores_done") if e.get("batches")]
    assert not chores or masters_wrote, chores
