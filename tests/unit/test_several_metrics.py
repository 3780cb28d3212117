"""One metrics server for several databases (observe/several.py), without a daemon: the
masters' checks and pulses in files, series labelled by the database of their queue or
pool, /healthz judging each master; and the supervisor's respawn back-off."""

from __future__ import annotations

import time
from pathlib import Path

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from supervisor.daemon.member import RESPAWN_MAX, respawn_delay
from supervisor.observe.several import SeveralCollector
from supervisor.observe.shared import Check, Pulse, pulse_path, write_check, write_databases


def samples(found: list[Metric]) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {(s.name, frozenset(s.labels.items())): s.value for m in found for s in m.samples}


def test_series_are_labelled_by_the_database_of_their_queue_or_pool(tmp_path: Path) -> None:
    directory = str(tmp_path)
    write_databases(directory, ["default", "reports"], {"pdf": "reports"})
    now = time.monotonic()
    write_check(directory, Check(now, time.time(), 30.0, leader=True, queues=[]), "default")
    write_check(
        directory, Check(now, time.time(), 30.0, alerts=[("max_ready", "pdf", True)]), "reports"
    )
    Pulse(pulse_path(directory, "default")).beat()
    pools = GaugeMetricFamily("forkq_pool_max_workers", "", labels=["pool"])
    pools.add_metric(["pdf"], 2.0)
    pools.add_metric(["alpha"], 3.0)
    found = samples(SeveralCollector(directory).add_master([pools]))
    assert (
        found["forkq_pool_max_workers", frozenset({("pool", "pdf"), ("database", "reports")})]
        == 2.0
    )
    assert (
        found["forkq_pool_max_workers", frozenset({("pool", "alpha"), ("database", "default")})]
        == 3.0
    )
    assert found["forkq_chores_leader", frozenset({("database", "default")})] == 1.0
    assert found["forkq_chores_leader", frozenset({("database", "reports")})] == 0.0
    alert = frozenset({("rule", "max_ready"), ("queue", "pdf"), ("database", "reports")})
    assert found["forkq_alerts_firing", alert] == 1.0
    loops = [k for k in found if k[0] == "forkq_master_loop_timestamp_seconds"]
    assert loops == [("forkq_master_loop_timestamp_seconds", frozenset({("database", "default")}))]


def test_healthz_is_ok_only_when_every_master_is(tmp_path: Path) -> None:
    directory = str(tmp_path)
    write_databases(directory, ["default", "reports"], {"pdf": "reports"})
    collector = SeveralCollector(directory)
    now = time.monotonic()
    for name in ("default", "reports"):
        Pulse(pulse_path(directory, name)).beat()
        write_check(directory, Check(now, time.time(), 30.0), name)
    health = collector.health()
    assert (
        health.ok and health.reason.startswith("default: ok") and "; reports: ok" in health.reason
    )
    write_check(directory, Check(now, time.time(), 30.0, db_error="refused"), "reports")
    health = collector.health()
    assert not health.ok and "reports: the database did not answer" in health.reason
    assert "default: ok" in health.reason


def test_a_master_that_keeps_dying_waits_longer_each_time() -> None:
    delays = [respawn_delay(n) for n in range(1, 10)]
    assert delays[:4] == [0.0, 1.0, 2.0, 4.0]
    assert delays == sorted(delays) and delays[-1] == RESPAWN_MAX
