"""The two last jobs of a batch ending at once on two connections (two hosts), MariaDB:
each counts the other as unfinished (READ COMMITTED, neither has committed), so a
count alone would settle nothing. The second to take the batch row's lock counts again
after the first committed and settles it: exactly one settle, its callbacks once."""

from __future__ import annotations

import threading
import time
from typing import Any

from util import database_name, mysql_connect

from supervisor import Queue
from supervisor.store import Store, open_store


def waiting_for_the_batch_lock(url: str) -> bool:
    """Whether a session of this test's database waits for a lock on forkq_batches."""
    conn: Any = mysql_connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.INNODB_TRX t"
                " JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id"
                " WHERE t.trx_state = 'LOCK WAIT' AND p.DB = %s"
                " AND t.trx_query LIKE %s",
                (database_name(url), "%FROM forkq_batches%"),
            )
            return int(cursor.fetchone()[0]) > 0
    finally:
        conn.close()


def test_the_two_last_jobs_ending_at_once_settle_the_batch_once(mysql_db_url: str) -> None:
    queue = Queue(mysql_db_url, wake=False)
    hosts: list[Store] = [open_store(mysql_db_url), open_store(mysql_db_url)]
    try:
        with queue.batch(on_success="cb.ok", on_complete="cb.all") as batch:
            batch.enqueue_many([{"handler": "t.job"}, {"handler": "t.job"}])
        for number, store in enumerate(hosts):
            [job] = store.claim("default", f"host{number}:1:w", 1, 60)
            assert job.batch_id == batch.id
            store.note_batch_job(job.id, job.batch_id)
        held = [store.held_by(f"host{n}:1:w")[0].id for n, store in enumerate(hosts)]
        first_done, errors = threading.Event(), []

        def second() -> None:
            try:
                first_done.wait(30)
                with hosts[1].transaction():  # sees the first's job running; waits for its lock
                    hosts[1].complete_in_transaction("host1:1:w", [held[1]], "delete")
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        thread = threading.Thread(target=second)
        thread.start()
        with hosts[0].transaction():
            hosts[0].complete_in_transaction("host0:1:w", [held[0]], "delete")
            first_done.set()  # its end is written, not committed: the second counts it open
            deadline = time.monotonic() + 30
            while not waiting_for_the_batch_lock(mysql_db_url):
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
