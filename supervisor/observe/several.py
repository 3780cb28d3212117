"""A scrape with several databases: one server for the host, a master per database.

Each master writes its check (check-NAME.json) and its pulse (pulse-NAME) in the
metrics directory; the supervisor names the databases and which holds each queue in
databases.json. Every series with a `queue` or `pool` label gets a `database` label
(a pool works the queue of its name, and a queue lives in one database), the check's
and the loop's series get their master's; /healthz judges every master and says each.
With one database none of this runs and no series has a `database` label.
"""

from __future__ import annotations

import os
import time

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from supervisor.observe.collect import ForkqCollector, check_families, health_of
from supervisor.observe.health import Health
from supervisor.observe.shared import Beat, Pulse, pulse_path, read_check, read_databases

HOME = "default"  # config.model.HOME_DATABASE (not imported: the server stays light)


class SeveralCollector(ForkqCollector):
    """The server's collector with several databases: every master's, labelled."""

    def __init__(self, directory: str) -> None:
        super().__init__(directory, None)

    def add_master(self, found: list[Metric]) -> list[Metric]:
        return collect_several(self.directory, found)

    def health(self, now: float | None = None) -> Health:
        return health_of_several(self.directory, time.monotonic() if now is None else now)


def collect_several(directory: str, found: list[Metric]) -> list[Metric]:
    """The processes' series labelled by database, then each master's check and loop."""
    names, queues = read_databases(directory)
    for metric in found:
        labelled = []
        for sample in metric.samples:
            queue = sample.labels.get("queue") or sample.labels.get("pool")
            if queue is not None and "database" not in sample.labels:
                labels = {**sample.labels, "database": queues.get(queue, HOME)}
                sample = sample._replace(labels=labels)
            labelled.append(sample)
        metric.samples = labelled
    loops = GaugeMetricFamily(
        "forkq_master_loop_timestamp_seconds",
        "When the master's loop last turned (it turns at least once a second)",
        labels=["database"],
    )
    merged: dict[str, Metric] = {}
    for name in names:
        beat = _pulse(directory, name)
        if beat is not None:
            loops.add_metric([name], beat.wall)
        for family in check_families(read_check(directory, name)):
            into = merged.setdefault(family.name, _empty_like(family))
            for sample in family.samples:
                into.samples.append(sample._replace(labels={**sample.labels, "database": name}))
    return [*found, *merged.values(), loops]


def health_of_several(directory: str, now: float) -> Health:
    """200 when every master is healthy; each master's line, its database first."""
    names, _ = read_databases(directory)
    if not names:
        return Health(False, "no master has started")
    judged = [
        (name, health_of(_pulse(directory, name), read_check(directory, name), now))
        for name in names
    ]
    text = "; ".join(f"{name}: {health.reason}" for name, health in judged)
    return Health(all(health.ok for _, health in judged), text)


def _pulse(directory: str, name: str) -> Beat | None:
    path = pulse_path(directory, name)
    if not os.path.exists(path):
        return None
    try:
        return Pulse(path).read()
    except (OSError, ValueError):
        return None


def _empty_like(family: Metric) -> Metric:
    return Metric(family.name, family.documentation, family.type)
