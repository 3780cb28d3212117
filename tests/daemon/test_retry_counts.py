"""A retry says what it did: a job an idle worker claims the moment the retry commits is
still counted as retried (the count is read before that commit), never as "not retried",
which would make an operator's script retry it again and run it twice."""

from __future__ import annotations

from pathlib import Path

from daemon_util import Daemon
from util import wait_until

from supervisor import Queue
from supervisor.store import Store


def test_a_retried_job_a_worker_claims_at_once_counts_as_retried(
    tmp_path: Path, db_url: str, store: Store
) -> None:
    # Idle workers that look for work every 5 ms: a retried job is claimed within moments.
    daemon = Daemon(
        tmp_path, db_url, pools={"work": {"workers": 2}}, supervisor={"poll_interval": 0.005}
    )
    try:
        daemon.start().wait_ready()
        queue = Queue(db_url, wake=False)
        ids = [queue.enqueue("t.fail", {}, queue="work", max_attempts=1) for _ in range(40)]
        wait_until(lambda: store.still_dead(ids) == sorted(ids), timeout=60, message="all dead")
        counts = [store.retry_jobs([job_id]) for job_id in ids]
        assert counts == [1] * len(counts)  # none is running yet when it is counted
        queue.close()
    finally:
        daemon.kill_all()
