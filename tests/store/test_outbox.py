"""What the store refuses to write never ends a worker (issue 22.4): a failure it cannot
take ends the job dead with the reason, and the outbox goes on with the next one.
"""

from __future__ import annotations

from store_util import A, claim_one, put

from supervisor import logs
from supervisor.models import JobState
from supervisor.store import Store
from supervisor.work.outbox import Failure, Outbox, Snoozed


def test_a_failure_the_store_refuses_ends_the_job_dead_with_the_reason(store: Store) -> None:
    refused, written = put(store), put(store)
    claim_one(store)
    claim_one(store)
    outbox = Outbox(store, A, logs.get())
    # A lone surrogate: no driver encodes it (Outbox.failure escapes one; this did not).
    outbox.pending.failures.append(Failure(refused, "bad \udc80", False, 1.0, 3))
    outbox.pending.failures.append(Snoozed(written, 60.0, 5, "waiting"))
    outbox.flush_failures()
    assert not outbox.pending
    row = store.get_job(refused)
    assert row is not None and row.status == JobState.DEAD, row
    assert (row.last_error or "").startswith(
        "its outcome could not be written (UnicodeEncodeError: "
    ), row.last_error
    snoozed = store.get_job(written)
    assert snoozed is not None and snoozed.status == JobState.SCHEDULED  # the next one too
