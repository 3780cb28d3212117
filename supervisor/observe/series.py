"""The series each process writes, in prometheus-client's multiprocess files.

Imported only once `[metrics]` is on (the worker pays nothing without the extra).
Every process that records makes its own objects after its fork, on a value class of
its own (`values.MultiProcessValue()`, files named by its pid), so a child's files
hold what the child counts and nothing of the master's. Children count jobs; the
master counts child exits and keeps the pool gauges, in 'mostrecent' mode: it is their
only writer, so the series carry no pid label, and the newest value wins.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Mapping

from prometheus_client import Counter, Gauge, Histogram, values

# Seconds: quick jobs to the hour-long ones a pool's timeout allows.
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
)  # fmt: skip


def own_files() -> None:
    """This process's own multiprocess value class: its files carry its pid."""
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]


def _finished() -> Counter:
    return Counter(
        "forkq_jobs_finished_total",
        "Attempts finished, by how they ended",
        ["queue", "handler", "outcome"],
        registry=None,
    )


def _db_errors(database: str | None) -> Counter:
    return _per_database(
        database,
        "forkq_db_errors_total",
        "Database calls that failed (master, check ticks and workers)",
    )


def _db_conflicts(database: str | None) -> Counter:
    return _per_database(
        database,
        "forkq_db_conflicts_total",
        "Transactions that lost a race (a deadlock, a Galera certification conflict, a"
        " lock-wait timeout) and were run again",
    )


def _per_database(database: str | None, name: str, text: str) -> Counter:
    """A counter of this process's database calls: labelled by database when there are
    several (a master's and its children's; observe/several.py), else unlabelled."""
    if database is None:
        return Counter(name, text, registry=None)
    return Counter(name, text, ["database"], registry=None).labels(database)


class JobSeries:
    """A worker's: one counter and one histogram observation per finished attempt."""

    def __init__(self, database: str | None = None) -> None:
        own_files()
        self.finished = _finished()
        self.duration = Histogram(
            "forkq_job_duration_seconds",
            "Time a handler ran, per attempt",
            ["queue", "handler"],
            buckets=DURATION_BUCKETS,
            registry=None,
        )
        self.db_errors = _db_errors(database)
        self.db_conflicts = _db_conflicts(database)
        # Labelled children by their labels: `labels()` checks and locks on every call.
        self._counts: dict[tuple[str, str, str], Counter] = {}
        self._times: dict[tuple[str, str], Histogram] = {}

    def job(self, queue: str, handler: str, outcome: str, seconds: float) -> None:
        timing = self._times.get((queue, handler))
        if timing is None:
            timing = self._times[queue, handler] = self.duration.labels(queue, handler)
        timing.observe(seconds)
        count = self._counts.get((queue, handler, outcome))
        if count is None:
            count = self._counts[queue, handler, outcome] = self.finished.labels(
                queue, handler, outcome
            )
        count.inc()


class MasterSeries:
    """The master's: pool gauges (written when they change), child exits, its DB errors."""

    def __init__(self, database: str | None = None) -> None:
        own_files()
        self.workers = Gauge(
            "forkq_pool_workers",
            "Live children of a pool, busy (running a job) or idle",
            ["pool", "state"],
            multiprocess_mode="mostrecent",
            registry=None,
        )
        self.max_workers = Gauge(
            "forkq_pool_max_workers",
            "The most children a pool may have now (max_workers, moved by TTIN/TTOU)",
            ["pool"],
            multiprocess_mode="mostrecent",
            registry=None,
        )
        self.child_exits = Counter(
            "forkq_child_exits_total",
            "Pool children that exited, by why",
            ["pool", "reason"],
            registry=None,
        )
        self.finished = _finished()  # attempts the master settles (a child killed mid-job)
        self.db_errors = _db_errors(database)
        self.db_conflicts = _db_conflicts(database)
        self._shown: dict[tuple[str, str], float] = {}

    def pools(self, max_workers: Mapping[str, int], children: Iterable[tuple[str, bool]]) -> None:
        tally = Tally(children)
        figures: dict[tuple[str, str], float] = {}
        for pool, most in max_workers.items():
            figures[pool, "busy"] = tally[pool, True]
            figures[pool, "idle"] = tally[pool, False]
            figures[pool, "max"] = most
        for gone in self._shown.keys() - figures.keys():  # a pool removed by a reload
            figures[gone] = 0
        for (pool, state), value in figures.items():
            if self._shown.get((pool, state)) == value:
                continue
            self._shown[pool, state] = value
            if state == "max":
                self.max_workers.labels(pool).set(value)
            else:
                self.workers.labels(pool, state).set(value)
