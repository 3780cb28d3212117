"""The master's parts built without a Master: Pooling, Settling and CheckTicks take the
shared state (daemon/shared.py) and the few callables they need, on a real SQLite store,
real Children, and (for the check tick) a real forked tick process."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from supervisor import events
from supervisor.config import Config, build_config
from supervisor.daemon.children import Children
from supervisor.daemon.dbguard import DbGuard
from supervisor.daemon.pooling import Pooling
from supervisor.daemon.settling import Settling
from supervisor.daemon.shared import Shared
from supervisor.daemon.state import PoolState, reloaded_pools
from supervisor.daemon.ticks import CheckTicks
from supervisor.proc import node_id
from supervisor.queue import Queue
from supervisor.store import Store, open_store


class Said:
    """A part's log: (event, fields) as it said them."""

    def __init__(self) -> None:
        self.said: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda event, **fields: self.said.append((event, fields))

    def events(self) -> list[str]:
        return [event for event, _ in self.said]


def config_for(url: str, pools: dict[str, Any] | None = None) -> Config:
    raw: dict[str, Any] = {"database": {"url": url}}
    if pools is not None:
        raw["pools"] = pools
    return build_config(raw, "<test>")


@pytest.fixture
def store(sqlite_db_url: str) -> Iterator[Store]:
    made = open_store(sqlite_db_url, timeout=0.5)
    yield made
    made.close()


def shared(store: Store, config: Config, log: Said, name: str = "host:1:master") -> Shared:
    guard = DbGuard(log, 0.5, lambda now: None, lambda: False, lambda: None)
    pools = {p.name: PoolState(p) for p in config.pools}
    return Shared(config, store, log, guard, "host", name, node_id(), pools)


def dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


# --- Pooling ---------------------------------------------------------------------------


def test_pooling_heartbeat_registers_the_master_again_once_its_row_is_gone(
    store: Store, sqlite_db_url: str
) -> None:
    log = Said()
    state = shared(store, config_for(sqlite_db_url), log)
    pooling = Pooling(state, Children(log, state.host, state.name), lambda: [])
    pooling.heartbeat()  # no row yet: beat finds none, so it registers
    rows = {p.name: p for p in store.list_processes()}
    assert rows[state.name].role == "master"
    assert rows[state.name].node == state.node
    assert rows[state.name].pid == os.getpid()


def test_pooling_resizes_the_pools_a_reload_put_on_the_state(
    store: Store, sqlite_db_url: str
) -> None:
    log = Said()
    state = shared(store, config_for(sqlite_db_url, {"a": {"workers": 1, "max_workers": 3}}), log)
    pooling = Pooling(state, Children(log, state.host, state.name), lambda: [])
    new = config_for(sqlite_db_url, {"b": {"workers": 1, "max_workers": 3}})
    state.config, state.pools = new, reloaded_pools(new.pools, state.pools)  # as reload() does
    pooling.resize_all(+1)
    assert {name: (p.minimum, p.maximum) for name, p in state.pools.items()} == {"b": (2, 4)}
    assert log.said == [(events.POOL_RESIZED, {"pool": "b", "size": 2, "by": "SIGTTIN"})]


def test_pooling_polls_nothing_while_every_pool_is_paused(store: Store, sqlite_db_url: str) -> None:
    log = Said()
    state = shared(store, config_for(sqlite_db_url), log)
    calls: list[int] = []
    pooling = Pooling(state, Children(log, state.host, state.name), lambda: [])
    state.paused = set(state.pools)  # as a check tick's report sets it
    state.guard.before_call = lambda now: calls.append(1)
    pooling.poll()
    assert calls == []
    state.paused = set()
    pooling.poll()
    assert calls == [1]


# --- Settling --------------------------------------------------------------------------


def test_settling_settles_this_node_s_dead_workers_found_at_boot(
    store: Store, sqlite_db_url: str
) -> None:
    log = Said()
    state = shared(store, config_for(sqlite_db_url), log)
    job = Queue(store=store).enqueue("tests.handlers.ok")
    store.register_process("host:9:gone", "host", dead_pid(), "worker", "default", node=state.node)
    store.register_process("other:9:w", "other", dead_pid(), "worker", "default", node="else")
    assert [r.id for r in store.claim("default", "host:9:gone", 1, 60.0)] == [job]
    Settling(state, []).settle_dead_local_processes()
    assert {p.name for p in store.list_processes()} == {"other:9:w"}
    row = store.get_job(job)
    assert row is not None and row.status != "running" and row.attempts == 1
    assert log.events() == [events.STALE_PROCESSES_SETTLED]


def test_settling_keeps_a_settle_until_the_database_answers(
    store: Store, sqlite_db_url: str
) -> None:
    log = Said()
    state = shared(store, config_for(sqlite_db_url), log)
    job = Queue(store=store).enqueue("tests.handlers.ok")
    assert [r.id for r in store.claim("default", "host:9:w", 1, 60.0)] == [job]
    settling = Settling(state, [])
    settling.unsettled.append((store, "host:9:w", job, "worker died", True, False, "died"))
    state.guard.error, state.guard.retry_at = "down", time.monotonic() + 3600  # breaker open
    settling.settle_pending()
    assert len(settling.unsettled) == 1
    state.guard.error, state.guard.retry_at = "down", 0.0  # it may retry now
    settling.settle_pending()
    assert settling.unsettled == []
    row = store.get_job(job)
    assert row is not None and row.status != "running" and row.attempts == 1
    assert log.said[-1] == (
        events.JOB_SETTLED,
        {"job_id": job, "error": "worker died", "attempt_counted": True},
    )


# --- CheckTicks ------------------------------------------------------------------------


def test_a_check_tick_s_report_lands_on_the_shared_state(store: Store, sqlite_db_url: str) -> None:
    log = Said()
    state = shared(store, config_for(sqlite_db_url), log)
    store.set_paused("default", True)
    state.clock_offset = 3600.0  # the report brings the database clock's offset (~0 here)
    ticks = CheckTicks(state, lambda: [], lambda: False)
    ticks.start(time.monotonic())
    assert ticks.pid is not None
    _, status = os.waitpid(ticks.pid, 0)
    ticks.exited(status)
    assert ticks.running is None
    assert abs(state.clock_offset) < 60
    assert state.paused == {"default"}
    assert log.said[-1][0] == events.CHECK_TICK and log.said[-1][1]["leader"] is True


def test_no_check_tick_starts_once_a_stop_is_asked(store: Store, sqlite_db_url: str) -> None:
    state = shared(store, config_for(sqlite_db_url), Said())
    ticks = CheckTicks(state, lambda: [], lambda: True)
    ticks.start(time.monotonic())
    assert ticks.running is None
