"""What a claim hands the worker is the row as stored, every field it reads, on both
backends: MySQL sends a claimed row's numbers packed in one column (store/mysql_claims.py)
and its ids bound in one step (store/mysql_binds.py); NULLs, negative numbers, a batch id,
a unique key, exact times and payload text must come back as `get_job` reads them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from store_util import LEASE, A

from supervisor import Queue
from supervisor.models import JobRow
from supervisor.store import Store
from supervisor.store.limits import fair
from supervisor.store.mysql_binds import IntIds, bound_ids, escape_int_ids
from supervisor.store.mysql_claims import UNPACK
from supervisor.store.queries import backend_queries

FIELDS = ("id", "queue", "handler", "payload", "priority", "max_attempts", "unique_key",
          "batch_id", "run_at", "enqueued_at")  # fmt: skip


def _fields(row: JobRow) -> tuple[object, ...]:
    return tuple(getattr(row, name) for name in FIELDS)


def test_a_claimed_row_is_the_stored_row_field_by_field(store: Store) -> None:
    queue = Queue(store=store, wake=False)
    past = datetime.now(UTC) - timedelta(seconds=5, microseconds=123_457)
    plain = queue.enqueue("t.plain", None, queue="work")
    full = queue.enqueue(
        "t.full", {"text": 'é "quoted" \\ 1 2 - 3', "n": [1.5, -2]}, queue="work",
        priority=-7, max_attempts=4, unique_key="key with spaces - 1", run_at=past,
    )  # fmt: skip
    with queue.batch(on_complete="t.report") as batch:
        batched = batch.enqueue("t.batched", {"b": 1}, queue="work", priority=-8)

    claimed = {row.id: row for row in store.claim("work", A, 10, LEASE)}

    assert set(claimed) == {plain, full, batched}
    for job_id, row in claimed.items():
        stored = store.get_job(job_id)
        assert stored is not None
        assert _fields(row) == _fields(stored)
        assert row.attempts == stored.attempts == 1 and row.locked_by == A
        assert row.run_at.tzinfo is not None and row.enqueued_at.tzinfo is not None
    assert claimed[full].priority == -7 and claimed[full].max_attempts == 4
    # (What enqueue wrote: MySQL may round its last microsecond; the claim reads it exactly.)
    assert abs(claimed[full].run_at - past) <= timedelta(microseconds=1)
    assert claimed[plain].max_attempts is None and claimed[plain].unique_key is None
    assert claimed[plain].batch_id is None and claimed[batched].batch_id is not None


def test_a_fair_pool_claims_the_stored_rows_too(store: Store) -> None:
    """A fair pool's claim reads each tenant's head job (fair_turn, packed as a claim's)."""
    queue = Queue(store=store, wake=False)
    ids = [
        queue.enqueue("t.fair", {"n": 1}, queue="fairrows", group_key="A", priority=-3,
                      max_attempts=2, unique_key="k 1"),
        queue.enqueue("t.fair", None, queue="fairrows", group_key="B"),
        queue.enqueue("t.fair", {"n": 3}, queue="fairrows", group_key="A"),
    ]  # fmt: skip
    fair._walk.clear()
    fair._steps.clear()
    try:
        taken = [fair.complete_and_claim(store, {}, "fairrows", A, 1, LEASE)[0] for _ in ids]
    finally:
        fair._walk.clear()
        fair._steps.clear()
    rows = [row for batch in taken for row in batch]
    assert sorted(row.id for row in rows) == ids
    for row in rows:
        assert _fields(row) == _fields(store.get_job(row.id))  # type: ignore[arg-type]
        assert row.attempts == 1 and row.locked_by == A


def test_every_packed_statement_sends_the_numbers_in_the_order_they_are_read() -> None:
    """mysql.sql has no shared fragments: claim_select, claim_select_limited and fair_turn
    each spell the packed column out, in the order mysql_claims.claim_row splits it."""
    expected = (
        "' ', id, priority, attempts, IFNULL(max_attempts, '-'), IFNULL(batch_id, '-'),"
        " IFNULL(UNIX_TIMESTAMP(run_at), '-'), IFNULL(UNIX_TIMESTAMP(enqueued_at), '-'"
    )
    queries = backend_queries("mysql")
    for name in UNPACK:
        packed = queries[name].split("CONCAT_WS(", 1)[1].split("AS numbers", 1)[0]
        assert " ".join(packed.replace("j.", "").split()).rstrip(")") == expected, name


def test_ids_are_bound_in_one_step_only_when_every_one_is_an_int() -> None:
    assert isinstance(bound_ids([3, 1, 2]), IntIds)
    assert escape_int_ids(IntIds([3, 1, 2])) == "(3,1,2)"
    for mixed in (["a", "b"], [1, "2"], [True, 2]):  # names, and no bool read as a number
        found = bound_ids(mixed)
        assert type(found) is tuple and list(found) == mixed
