"""A daemon killed -9 while its worker runs the last job of a batch (so that job's end is
never written): after the lease runs out, another daemon reaps it, runs it again, and the
batch's callbacks are enqueued and run exactly once (both backends)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from batch_util import callback_runs, lock_counters, report_locks, with_batch_handlers
from daemon_util import Daemon, daemons_fixture  # noqa: F401 (the `daemons` fixture)
from util import wait_until

from supervisor import Queue
from supervisor.store import Store

pytestmark = pytest.mark.faults

KILLER = '''
import os, signal
from supervisor import handler


@handler("b.killer")
def killer(payload, job):
    """The first run kills its daemon's master and itself with SIGKILL: nothing written."""
    marker = payload["marker"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
'''


def test_a_daemon_killed_during_the_last_job_of_a_batch_still_settles_it_once(
    daemons: Callable[..., Daemon],
    queue: Queue,
    store: Store,
    tmp_path: Path,
    db_url: str,
    record_property: Callable[[str, Any], None],
) -> None:
    calls, runs, marker = tmp_path / "callbacks.txt", tmp_path / "runs.txt", tmp_path / "killed"
    pools = {"default": {"workers": 1, "timeout": 1}}  # lease: 1 s + 30 s
    victim = with_batch_handlers(daemons(name="victim", pools=pools))
    victim.write_module("killerhandlers", KILLER)
    victim.write_config(supervisor={"handlers": [*victim.supervisor["handlers"], "killerhandlers"]})
    before = lock_counters(db_url)
    with queue.batch(on_success="b.callback", on_complete="b.callback",
                     payload={"file": str(calls)}) as batch:  # fmt: skip
        batch.enqueue_many([{"handler": "t.record", "payload": {"file": str(runs)}}] * 4)
        killer = batch.enqueue("b.killer", {"marker": str(marker)}, priority=-1)  # claimed last
    assert batch.id is not None
    victim.start()
    wait_until(lambda: not victim.alive(), timeout=30, message="the victim killed itself")
    assert marker.exists() and len(runs.read_text().splitlines()) == 4
    assert callback_runs(calls) == []
    status = queue.batch_status(batch.id)
    # The killer at least, and maybe a job whose success waited for the next claim's write.
    assert status is not None and status.pending >= 1 and status.settled_at is None
    victim.kill_all()  # what is left of its session (an orphaned check tick)
    rescuer = daemons(name="rescuer", pools=pools)
    rescuer.write_module("killerhandlers", KILLER)
    rescuer.write_config(supervisor={"handlers": victim.supervisor["handlers"]})
    rescuer.start().wait_ready()
    wait_until(lambda: len(callback_runs(calls)) >= 2, timeout=120, message="callbacks ran")
    wait_until(lambda: store.get_job(killer) is None, timeout=30, message="killer job done")
    record_property("lock_counters", report_locks(db_url, before, "killed during the last job"))
    status = queue.batch_status(batch.id)
    assert status is not None and status.settled_at is not None
    assert (status.total, status.done, status.dead, status.pending) == (5, 5, 0, 0)
    seen = Counter(event for event, *_ in callback_runs(calls))
    assert seen == {"complete": 1, "success": 1}
    assert {e: j for e, _b, j, *_ in callback_runs(calls)} == status.fired
