"""The last jobs of a batch ending at once on two connections (two hosts), MariaDB:
each counts the other's as unfinished (READ COMMITTED, neither has committed), so a
count alone would settle nothing. The second to take the batch row's lock counts again
after the first committed and settles it: exactly one settle, its callbacks once. Each
host ends one job, or a claim's worth (17: more than FEW_LEFT, which alone left such a
batch to the chore, up to a check interval later)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from util import mysql_connect

from supervisor import Queue
from supervisor.store import Store, open_store
from supervisor.store.batches import FEW_LEFT


def waiting_for_the_batch_lock(url: str, thread_id: int) -> bool:
    """Whether the session `thread_id` is in its batch row's locking read (which only waits
    there: the first host holds that row). From PROCESSLIST, which is live: the server's
    InnoDB transaction tables are a cache that can still show an earlier test's wait."""
    conn: Any = mysql_connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s AND INFO LIKE %s",
                (thread_id, "%FROM forkq_batches%FOR UPDATE%"),
            )
            return int(cursor.fetchone()[0]) > 0
    finally:
        conn.close()


# With 17 a host both ways: a DELETE the server planned on the status index waited for
# the other host's locked rows, where the UPDATE reads past them (test_ack_locks.py).
@pytest.mark.parametrize(
    ("each", "mode"), [(1, "delete"), (FEW_LEFT + 1, "keep"), (FEW_LEFT + 1, "delete")]
)
def test_the_last_jobs_ending_at_once_on_two_hosts_settle_the_batch_once(
    mysql_db_url: str, each: int, mode: str
) -> None:
    queue = Queue(mysql_db_url, wake=False)
    hosts: list[Store] = [open_store(mysql_db_url), open_store(mysql_db_url)]
    try:
        with queue.batch(on_success="cb.ok", on_complete="cb.all") as batch:
            batch.enqueue_many([{"handler": "t.job"}] * (2 * each))
        held: list[list[int]] = []
        for number, store in enumerate(hosts):
            jobs = store.claim("default", f"host{number}:1:w", each, 60)
            assert len(jobs) == each and {job.batch_id for job in jobs} == {batch.id}
            for job in jobs:
                store.note_batch_job(job.id, batch.id or 0)
            held.append([job.id for job in jobs])
        first_done, errors = threading.Event(), []
        second_session = int(hosts[1]._connection().thread_id())  # type: ignore[attr-defined]

        def second() -> None:
            try:
                first_done.wait(30)
                with hosts[1].transaction():  # sees the first's jobs running; waits for its lock
                    hosts[1].complete_in_transaction("host1:1:w", held[1], mode)
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        with hosts[0].transaction():
            hosts[0].complete_in_transaction("host0:1:w", held[0], mode)
            first_done.set()  # its end is written, not committed: the second counts it open
            deadline = time.monotonic() + 30
            while not waiting_for_the_batch_lock(mysql_db_url, second_session):
                assert time.monotonic() < deadline, "the second never waited for the batch row"
                time.sleep(0.02)
        thread.join(30)
        assert not thread.is_alive() and errors == []
        status = queue.batch_status(batch.id or 0)
        assert status is not None and status.settled_at is not None
        assert set(status.fired) == {"success", "complete"}
        callbacks = [r for r in queue.store.list_jobs() if r.handler.startswith("cb.")]
        assert sorted(r.id for r in callbacks) == sorted(status.fired.values())
    finally:
        for store in hosts:
            store.close()
        queue.close()
