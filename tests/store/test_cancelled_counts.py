"""Cancelled jobs are counted where done and dead jobs are: Store.stats (what the check
tick, the metrics and the dashboard's overview read), `forkq status` and its --json."""

from __future__ import annotations

import json
import subprocess
import sys

from util import subprocess_env

from supervisor import Queue
from supervisor.models import CancelResult
from supervisor.store import Store


def forkq(db_url: str, *args: str) -> str:
    env = subprocess_env(db_url)
    env.pop("FORKQ_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", *args, "--database", db_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_cancelled_jobs_are_counted_per_queue(queue: Queue, store: Store, db_url: str) -> None:
    ids = [queue.enqueue("mail.send", {"n": n}, queue="email", delay=3600) for n in range(3)]
    ids.append(queue.enqueue("mail.send", {"n": 9}, queue="email"))
    results = store.cancel_jobs(ids[1:], by="test")
    assert set(results.values()) == {CancelResult.CANCELLED}
    [email] = store.stats()
    assert (email.queue, email.cancelled, email.delayed, email.ready) == ("email", 3, 1, 0)
    [capped] = store.stats(cap=2)
    assert capped.cancelled == 2 and "cancelled" in capped.capped  # "2+", like the others
    documents = json.loads(forkq(db_url, "status", "--json"))["queues"]
    assert [q["cancelled"] for q in documents if q["queue"] == "email"] == [3]
    table = forkq(db_url, "status").splitlines()
    header = next(line for line in table if line.startswith("QUEUE"))
    row = next(line for line in table if line.startswith("email"))
    assert "CANCELLED" in header.split()
    assert row.split()[header.split().index("CANCELLED")] == "3"
