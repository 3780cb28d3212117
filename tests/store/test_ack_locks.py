"""A worker's ack of its own jobs never waits on another worker's rows (MariaDB).

The ack names its jobs by id and also checks their status and owner. On a small table the
optimizer planned that DELETE on forkq_jobs_status (a range on the status), and a DELETE in
READ COMMITTED waits for every locked row it scans: one worker's ack waited for another's
open transaction on its own running jobs (up to innodb_lock_wait_timeout, 50 s). The ack
statements force the primary key now (store/sql/mysql.sql)."""

from __future__ import annotations

import threading

import pytest

from supervisor import Queue
from supervisor.store import Store, open_store


@pytest.mark.parametrize("mode", ["delete", "archive", "keep"])
def test_an_ack_does_not_wait_for_another_workers_open_ack(mysql_db_url: str, mode: str) -> None:
    queue = Queue(mysql_db_url, wake=False)
    hosts: list[Store] = [open_store(mysql_db_url), open_store(mysql_db_url)]
    try:
        queue.enqueue_many([{"handler": "t.job"}] * 6)
        held = [
            [job.id for job in store.claim("default", f"host{number}:1:w", 3, 60)]
            for number, store in enumerate(hosts)
        ]
        assert all(len(ids) == 3 for ids in held)
        finished, errors = threading.Event(), []

        def second() -> None:
            try:
                assert hosts[1].complete("host1:1:w", held[1], mode) == 3
                finished.set()
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(exc)

        with hosts[0].transaction():
            hosts[0].complete_in_transaction("host0:1:w", held[0], mode)
            thread = threading.Thread(target=second)  # while the first's rows stay locked
            thread.start()
            thread.join(30)
            ended_while_locked = finished.is_set()
        thread.join(60)
        assert errors == []
        assert ended_while_locked, "the second ack waited for the first's open transaction"
        states = {job.id: job.status for job in map(queue.get, held[0] + held[1]) if job}
        assert all(states.get(i, "done") == "done" for i in held[0] + held[1])
    finally:
        for store in hosts:
            store.close()
        queue.close()


def test_the_ack_plans_use_the_primary_key(mysql_db_url: str) -> None:
    """The same thing without a second session: EXPLAIN of each statement on ids."""
    store = open_store(mysql_db_url)
    try:
        for name in ("complete_delete", "complete_keep", "deps_complete_delete", "extend_leases"):
            sql = store.queries[name]  # type: ignore[attr-defined]
            params = {"ids": (1, 2, 3), "owner": "x", "lease_us": 1, "skip": 1}
            with store._connection().cursor() as cursor:  # type: ignore[attr-defined]
                cursor.execute("EXPLAIN " + sql, params)
                keys = {row[5] for row in cursor.fetchall()}
            assert keys == {"PRIMARY"}, (name, keys)
    finally:
        store.close()
