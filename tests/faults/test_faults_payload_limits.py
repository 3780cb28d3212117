"""Payloads larger than the database takes (issue 12, item 7), on a private MariaDB whose
max_allowed_packet is set to 1 MB: a payload just over it is refused as `PayloadTooLarge`
and one just under it stored; a batch larger than it is split into statements that fit.
The shared server (16 MB) and SQLite: tests/store/test_payload_limits.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from private_mariadb import PrivateMariaDB, private_db_url, private_mariadb  # noqa: F401

from supervisor import PayloadTooLarge, Queue

pytestmark = pytest.mark.timeout(300)

MB = 1024 * 1024


def payload_of(size: int) -> dict[str, str]:
    return {"blob": "x" * size}


# --- a private server with a small max_allowed_packet --------------------------------------------


@pytest.fixture
def small_packets(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
) -> Iterator[str]:
    """The private server taking statements of at most 1 MB (new sessions)."""
    private_mariadb.admin(f"SET GLOBAL max_allowed_packet = {MB}")
    yield private_db_url
    private_mariadb.admin(f"SET GLOBAL max_allowed_packet = {16 * MB}")


@pytest.mark.faults
def test_a_payload_just_over_the_limit_is_refused_and_one_under_it_is_stored(
    small_packets: str,
) -> None:
    queue = Queue(small_packets)
    try:
        with pytest.raises(PayloadTooLarge, match=r"1\.0 MB"):
            queue.enqueue("t.noop", payload_of(MB))
        job_id = queue.enqueue("t.noop", payload_of(MB - 4096))
        row = queue.get(job_id)
        assert row is not None and len(json.loads(row.payload)["blob"]) == MB - 4096
    finally:
        queue.close()


@pytest.mark.faults
def test_a_batch_larger_than_the_limit_is_split_into_statements_that_fit(
    small_packets: str,
) -> None:
    queue = Queue(small_packets)
    try:
        jobs = [{"handler": "t.noop", "payload": {"n": n, "pad": "é" * 60_000}} for n in range(40)]
        ids = queue.enqueue_many(jobs)  # about 4.8 MB: five statements or more
        assert len(ids) == 40 and ids == sorted(ids)
        payloads = [row.payload for row in map(queue.get, ids) if row is not None]
        assert [json.loads(text)["n"] for text in payloads] == list(range(40))
    finally:
        queue.close()
