"""What a scrape reads: the processes' mmap files, the last check, the master's pulse.

Nothing here queries the database. The series every process recorded come from
prometheus-client's MultiProcessCollector; the queue figures and alerts from the
last check tick (shared.Check), built as gauge families per scrape, so a queue that
drained, an alert that was dropped or a chores lease that moved away takes its series
with it (a multiprocess file can only ever add series).

Children are recycled (max_jobs_per_child, max_child_lifetime), and each leaves its
counter and histogram files behind. Before each scrape the files of processes that
are gone are folded into one archive file per type and removed, so a scrape reads
one file per live process, not one per child that ever lived. A process is gone when
its pid no longer exists: the master has reaped it, and pids are handed out in order,
so a new process does not take that pid (and its file) while it is being folded.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import time

from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from supervisor.observe.health import DB_STALE_FLOOR, Health, Seen, judge
from supervisor.observe.shared import Beat, Check, Pulse, read_check

# forkq_queue_jobs{status}: QueueStats field by status label.
STATUSES = (
    ("ready", "ready"),
    ("scheduled", "delayed"),
    ("running", "running"),
    ("dead", "dead"),
    ("done", "done"),
    ("waiting", "waiting"),
    ("cancelled", "cancelled"),
)
_PER_PROCESS = re.compile(r"^(counter|histogram|summary)_(\d+)\.db$")
_ANY_PROCESS = re.compile(r"^[a-z]+(?:_[a-z]+)?_(\d+)\.db$")


class ForkqCollector:
    """The one collector the server registers: files, check and pulse, per scrape."""

    def __init__(self, directory: str, pulse: Pulse | None) -> None:
        self.directory = directory
        self.pulse = pulse  # None: several databases (observe/several.py reads theirs)
        self.lock = threading.Lock()  # one scrape at a time reads and folds the files

    def collect(self) -> list[Metric]:
        with self.lock:
            fold_gone(self.directory)
            found = read_files(self.directory)
        return self.add_master(found)

    def add_master(self, found: list[Metric]) -> list[Metric]:
        """The master's own: its last check and its loop's last turn."""
        assert self.pulse is not None
        found += check_families(read_check(self.directory))
        loop = self.pulse.read()
        if loop is not None:
            found.append(
                GaugeMetricFamily(
                    "forkq_master_loop_timestamp_seconds",
                    "When the master's loop last turned (it turns at least once a second)",
                    value=loop.wall,
                )
            )
        return found

    def health(self, now: float | None = None) -> Health:
        assert self.pulse is not None
        return health_of(self.pulse.read(), read_check(self.directory), now)


def health_of(loop: Beat | None, check: Check | None, now: float | None = None) -> Health:
    """What /healthz says of one master: its pulse and its last check."""
    seen = Seen(
        loop_at=None if loop is None else loop.at,
        checked_at=None if check is None else check.checked_at,
        db_error=None if check is None else check.db_error,
        check_stale_after=math.inf if check is None else check.stale_after,
        db_answered_at=0.0 if loop is None else loop.db_answered_at,
        db_limit=DB_STALE_FLOOR if loop is None else loop.db_limit,
        db_out=loop is not None and loop.db_out,
    )
    return judge(seen, time.monotonic() if now is None else now)


def read_files(directory: str) -> list[Metric]:
    """Every process's series, merged as prometheus-client's MultiProcessCollector does.

    A file of size 0 is one a process is creating right now (opened, not yet sized):
    it holds nothing yet, and reading it would fail the scrape. A file may also go
    between the listing and its reading (a master of several databases exited: the
    supervisor removes its gauges); the merge then starts again from a new listing,
    rather than fail the scrape.
    """
    for _ in range(READ_TRIES - 1):
        with contextlib.suppress(FileNotFoundError):
            return _merged(directory)
    return _merged(directory)


READ_TRIES = 5  # listings a scrape takes while files vanish under it


def _merged(directory: str) -> list[Metric]:
    files = []
    for entry in os.scandir(directory):
        with contextlib.suppress(FileNotFoundError):
            if entry.name.endswith(".db") and entry.stat().st_size > 0:
                files.append(entry.path)
    return list(MultiProcessCollector.merge(files, accumulate=True))  # type: ignore[no-untyped-call]


def check_families(check: Check | None) -> list[Metric]:
    """Gauges of the last check tick: queue figures (chores holder only) and alerts."""
    if check is None:
        return []
    families: list[Metric] = [
        GaugeMetricFamily(
            "forkq_chores_leader",
            "1 on the daemon that held the chores lease at the last check: it exports forkq_queue_*",
            value=float(check.leader),
        ),
        GaugeMetricFamily(
            "forkq_last_check_timestamp_seconds",
            "When the last check tick reported",
            value=check.checked_wall,
        ),
    ]
    alerts = GaugeMetricFamily(
        "forkq_alerts_firing",
        "1 while an alert rule fires, 0 once it resolved (queue: the queue or pool, or empty)",
        labels=["rule", "queue"],
    )
    for rule, queue, firing in check.alerts:
        alerts.add_metric([rule, queue], float(firing))
    families.append(alerts)
    if check.queues is not None:
        families += _queue_families(check.queues)
    return families


def _queue_families(queues: list[dict[str, object]]) -> list[Metric]:
    jobs = GaugeMetricFamily(
        "forkq_queue_jobs",
        "Jobs per queue and status at the last check (counts stop at the tick's caps)",
        labels=["queue", "status"],
    )
    oldest = GaugeMetricFamily(
        "forkq_queue_oldest_ready_seconds",
        "How long the oldest due job had waited at the last check",
        labels=["queue"],
    )
    paused = GaugeMetricFamily("forkq_queue_paused", "1 while a queue is paused", labels=["queue"])
    for figures in queues:
        name = str(figures["queue"])
        for status, field in STATUSES:
            jobs.add_metric([name, status], _number(figures.get(field)))
        oldest.add_metric([name], _number(figures.get("oldest_ready_age")))
        paused.add_metric([name], _number(figures.get("paused")))
    return [jobs, oldest, paused]


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


# --- folding the files of gone processes -------------------------------------------------


def fold_gone(directory: str) -> int:
    """Fold counter, histogram and summary files of gone processes into the archives; how many."""
    gone: dict[str, list[str]] = {}
    dead_pids: set[int] = set()
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(directory):
            match = _ANY_PROCESS.match(name)
            if match is None or _alive(int(match[1])):
                continue
            dead_pids.add(int(match[1]))
            typed = _PER_PROCESS.match(name)
            if typed is not None:
                gone.setdefault(typed[1], []).append(os.path.join(directory, name))
    for pid in dead_pids:  # 'live' gauges of handler code end with their process
        mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
    for kind, files in gone.items():
        _fold(directory, kind, sorted(files))
    return sum(len(files) for files in gone.values())


def _fold(directory: str, kind: str, files: list[str]) -> None:
    """archive + files -> a new archive, renamed into place, then the files removed.

    Values are kept as stored (histogram buckets not accumulated), so the archive reads
    like any process's file. Only the server reads or folds, under its lock: no scrape
    sees a file counted twice or not at all.
    """
    archive = os.path.join(directory, f"{kind}_archive.db")
    sources = [archive, *files] if os.path.exists(archive) else files
    merged = MultiProcessCollector.merge(sources, accumulate=False)  # type: ignore[no-untyped-call]
    temporary = os.path.join(directory, f"{kind}_archive.tmp")  # not *.db: never read
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    out = MmapedDict(temporary)  # type: ignore[no-untyped-call]
    try:
        for metric in merged:
            for sample in metric.samples:
                labels = dict(sample.labels)
                key = mmap_key(
                    metric.name,
                    sample.name,
                    list(labels),
                    list(labels.values()),
                    metric.documentation,
                )
                out.write_value(key, sample.value, 0.0)  # type: ignore[no-untyped-call]
    finally:
        out.close()  # type: ignore[no-untyped-call]
    os.replace(temporary, archive)
    for path in files:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now holds that pid: not ours to judge
        return True
    return True
