"""Cron slots as a pure function of fixed times, and enqueueing them once across hosts."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from supervisor.cluster.schedules import due_slots, enqueue_due, next_run, next_slot
from supervisor.config import ScheduleConfig
from supervisor.store import Store, open_store

UTC_ZONE, TOKYO, NEW_YORK = "UTC", "Asia/Tokyo", "America/New_York"


def at(*parts: int, tz: str = UTC_ZONE, fold: int = 0) -> float:
    """Epoch seconds of a wall time in `tz` (fold=1: the second of a repeated hour)."""
    return datetime(*parts, tzinfo=ZoneInfo(tz), fold=fold).timestamp()  # type: ignore[misc]


def wall(ts: float, tz: str) -> str:
    return datetime.fromtimestamp(ts, ZoneInfo(tz)).isoformat()


# --- due_slots -----------------------------------------------------------------------------


def test_a_slot_is_due_at_its_time_not_before() -> None:
    created = at(2024, 1, 1, 0, 0)
    assert due_slots("0 4 * * *", UTC_ZONE, None, at(2024, 1, 1, 3, 59, 59), "once", created) == []
    assert due_slots("0 4 * * *", UTC_ZONE, None, at(2024, 1, 1, 4, 0), "once", created) == [
        at(2024, 1, 1, 4)
    ]
    assert due_slots("0 4 * * *", UTC_ZONE, None, at(2024, 1, 1, 4, 0, 7), "once", created) == [
        at(2024, 1, 1, 4)
    ]


def test_a_slot_already_enqueued_is_not_due_again() -> None:
    last = at(2024, 1, 1, 4)
    assert due_slots("0 4 * * *", UTC_ZONE, last, at(2024, 1, 1, 23, 59), "once", 0.0) == []
    assert due_slots("0 4 * * *", UTC_ZONE, last, at(2024, 1, 2, 4, 0, 1), "once", 0.0) == [
        at(2024, 1, 2, 4)
    ]


def test_history_before_the_first_sight_is_not_backfilled() -> None:
    created = at(2024, 1, 1, 4, 0, 1)  # the daemon first saw the schedule a second late
    assert due_slots("0 4 * * *", UTC_ZONE, None, at(2024, 1, 1, 12), "once", created) == []
    assert due_slots("0 4 * * *", UTC_ZONE, None, at(2024, 1, 2, 4, 0, 3), "once", created) == [
        at(2024, 1, 2, 4)
    ]


def test_slots_are_read_in_the_schedules_time_zone() -> None:
    # 04:00 in Tokyo (UTC+9, no DST) is 19:00 UTC the day before
    created = at(2024, 1, 1, 0, 0)
    assert due_slots("0 4 * * *", TOKYO, None, at(2024, 1, 1, 18, 59), "once", created) == []
    (slot,) = due_slots("0 4 * * *", TOKYO, None, at(2024, 1, 1, 19, 0, 30), "once", created)
    assert slot == at(2024, 1, 1, 19, 0) == at(2024, 1, 2, 4, 0, tz=TOKYO)
    assert wall(slot, TOKYO) == "2024-01-02T04:00:00+09:00"


def test_a_wall_time_skipped_by_spring_forward_runs_when_the_clock_jumps() -> None:
    # 2024-03-10 in New York: 02:00 EST -> 03:00 EDT; 02:30 does not exist that day
    last = at(2024, 3, 9, 2, 30, tz=NEW_YORK)
    assert (
        due_slots("30 2 * * *", NEW_YORK, last, at(2024, 3, 10, 1, 59, tz=NEW_YORK), "once", 0.0)
        == []
    )
    (slot,) = due_slots(
        "30 2 * * *", NEW_YORK, last, at(2024, 3, 10, 3, 0, 5, tz=NEW_YORK), "once", 0.0
    )
    assert wall(slot, NEW_YORK) == "2024-03-10T03:00:00-04:00"
    assert wall(next_run("30 2 * * *", NEW_YORK, slot), NEW_YORK) == "2024-03-11T02:30:00-04:00"
    assert next_run("30 2 * * *", NEW_YORK, slot) - slot == 23.5 * 3600


def test_a_repeated_wall_time_runs_once_on_fall_back() -> None:
    # 2024-11-03 in New York: 02:00 EDT -> 01:00 EST; 01:30 happens twice
    first = at(2024, 11, 3, 1, 30, tz=NEW_YORK)
    second = at(2024, 11, 3, 1, 30, tz=NEW_YORK, fold=1)
    assert second - first == 3600
    last = at(2024, 11, 2, 1, 30, tz=NEW_YORK)
    assert due_slots("30 1 * * *", NEW_YORK, last, first + 1, "once", 0.0) == [first]
    assert due_slots("30 1 * * *", NEW_YORK, first, second + 1, "once", 0.0) == []
    assert wall(next_run("30 1 * * *", NEW_YORK, first), NEW_YORK) == "2024-11-04T01:30:00-05:00"


def test_the_next_slot_listed_is_one_due_that_waits_for_its_check_tick() -> None:
    """`forkq schedules` and the dashboard at 03:58:42 with the 03:58:30 slot enqueued:
    03:58:40 fell due and waits for the next check tick (5 s apart), so it is the next
    run, not 03:58:50. A slot missed long ago (the daemons were down) is not."""
    every_10s = "* * * * * */10"
    now = at(2026, 11, 29, 3, 58, 42)
    last = at(2026, 11, 29, 3, 58, 30)
    assert next_slot(every_10s, UTC_ZONE, now, last, 5.0) == at(2026, 11, 29, 3, 58, 40)
    assert next_run(every_10s, UTC_ZONE, now) == at(2026, 11, 29, 3, 58, 50)
    assert next_slot(every_10s, UTC_ZONE, now, None, 5.0) == at(2026, 11, 29, 3, 58, 50)
    long_ago = at(2026, 11, 28, 3, 58, 30)
    assert next_slot(every_10s, UTC_ZONE, now, long_ago, 5.0) == at(2026, 11, 29, 3, 58, 50)
    enqueued = at(2026, 11, 29, 3, 58, 40)  # the tick came: the next one is ahead
    assert next_slot(every_10s, UTC_ZONE, now, enqueued, 5.0) == at(2026, 11, 29, 3, 58, 50)


def test_an_hourly_schedule_runs_every_real_hour_across_fall_back() -> None:
    one_edt = at(2024, 11, 3, 1, 0, tz=NEW_YORK)
    one_est = at(2024, 11, 3, 1, 0, tz=NEW_YORK, fold=1)
    assert due_slots("0 * * * *", NEW_YORK, one_edt, one_est + 30, "once", 0.0) == [one_est]
    assert next_run("0 * * * *", NEW_YORK, one_est) == one_est + 3600
    # and skips only the hour that does not exist in spring
    two_est = at(2024, 3, 10, 1, 0, tz=NEW_YORK)
    assert next_run("0 * * * *", NEW_YORK, two_est) - two_est == 3600
    assert wall(next_run("0 * * * *", NEW_YORK, two_est), NEW_YORK) == "2024-03-10T03:00:00-04:00"


def test_misfire_once_runs_only_the_latest_missed_slot() -> None:
    last = at(2024, 1, 1, 10, 0)
    now = at(2024, 1, 1, 12, 3)
    assert due_slots("*/5 * * * *", UTC_ZONE, last, now, "once", 0.0) == [at(2024, 1, 1, 12, 0)]
    # a nightly job missed for two nights while every host was down runs once on recovery
    nightly = due_slots("0 4 * * *", UTC_ZONE, at(2024, 1, 1, 4), at(2024, 1, 3, 10), "once", 0.0)
    assert nightly == [at(2024, 1, 3, 4)]


def test_misfire_skip_drops_slots_older_than_the_grace() -> None:
    last = at(2024, 1, 1, 10, 0)
    assert (
        due_slots("*/5 * * * *", UTC_ZONE, last, at(2024, 1, 1, 12, 3), "skip", 0.0, grace=60) == []
    )
    assert due_slots(
        "*/5 * * * *", UTC_ZONE, last, at(2024, 1, 1, 12, 0, 59), "skip", 0.0, grace=60
    ) == [at(2024, 1, 1, 12, 0)]
    assert (
        due_slots("0 4 * * *", UTC_ZONE, at(2024, 1, 1, 4), at(2024, 1, 3, 10), "skip", 0.0) == []
    )


def test_an_expression_that_never_comes_due_yields_nothing() -> None:
    assert due_slots("0 0 30 2 *", UTC_ZONE, None, at(2030, 1, 1), "once", at(2024, 1, 1)) == []
    with pytest.raises(ValueError, match="never comes due"):
        next_run("0 0 30 2 *", UTC_ZONE, at(2024, 1, 1))


def test_next_run_is_strictly_after_now() -> None:
    assert next_run("0 4 * * *", UTC_ZONE, at(2024, 1, 1, 4)) == at(2024, 1, 2, 4)
    assert next_run("0 4 * * *", UTC_ZONE, at(2024, 1, 1, 3, 59)) == at(2024, 1, 1, 4)
    assert next_run("0 4 * * *", TOKYO, at(2024, 1, 1, 0)) == at(2024, 1, 1, 19)


# --- enqueue_due against a real store ------------------------------------------------------


NIGHTLY = ScheduleConfig(
    name="nightly_report",
    cron="0 4 * * *",
    handler="reports.nightly",
    timezone=UTC_ZONE,
    queue="reports",
    payload={"kind": "daily"},
    priority=3,
)
STARTED = at(2024, 1, 1, 0, 0)


def test_two_hosts_enqueue_a_slot_exactly_once(db_url: str, store: Store) -> None:
    other = open_store(db_url)
    try:
        now = at(2024, 1, 1, 4, 0, 5)
        done = enqueue_due(store, (NIGHTLY,), now, STARTED, 60.0)
        assert [(name, slot) for name, slot, _ in done] == [("nightly_report", at(2024, 1, 1, 4))]
        assert enqueue_due(other, (NIGHTLY,), now + 1, STARTED + 30, 60.0) == []
        assert enqueue_due(store, (NIGHTLY,), now + 10, STARTED, 60.0) == []
    finally:
        other.close()
    (job,) = store.list_jobs(queue="reports")
    assert job.id == done[0][2]
    assert (job.handler, json.loads(job.payload), job.priority) == (
        "reports.nightly",
        {"kind": "daily"},
        3,
    )
    assert store.last_slot("nightly_report") == at(2024, 1, 1, 4)


def test_hosts_racing_for_the_same_slot_enqueue_one_job(db_url: str) -> None:
    stores = [open_store(db_url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    results: list[list[tuple[str, float, int]]] = []
    lock = threading.Lock()

    def host(store: Store) -> None:
        barrier.wait(timeout=10)
        done = enqueue_due(store, (NIGHTLY,), at(2024, 1, 1, 4, 0, 2), STARTED, 60.0)
        with lock:
            results.append(done)

    threads = [threading.Thread(target=host, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    try:
        assert len(results) == len(stores)
        assert sorted(len(done) for done in results) == [0, 0, 0, 1]
        assert len(stores[0].list_jobs(queue="reports")) == 1
    finally:
        for store in stores:
            store.close()


def test_a_nightly_missed_while_every_host_was_down_runs_once_on_recovery(
    store: Store,
) -> None:
    enqueue_due(store, (NIGHTLY,), at(2024, 1, 1, 4, 0, 1), STARTED, 60.0)
    recovered = at(2024, 1, 3, 10, 0)  # down from Jan 1 12:00 to Jan 3 10:00: two nights missed
    done = enqueue_due(store, (NIGHTLY,), recovered, recovered - 5, 60.0)
    assert [slot for _, slot, _ in done] == [at(2024, 1, 3, 4)]
    assert enqueue_due(store, (NIGHTLY,), recovered + 10, recovered - 5, 60.0) == []
    assert len(store.list_jobs(queue="reports")) == 2
    skipping = ScheduleConfig(
        name="skipper", cron="0 4 * * *", handler="reports.nightly", misfire="skip"
    )
    enqueue_due(store, (skipping,), at(2024, 1, 1, 4, 0, 1), STARTED, 60.0)
    assert enqueue_due(store, (skipping,), recovered, recovered - 5, 60.0) == []
