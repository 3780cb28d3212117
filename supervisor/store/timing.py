"""Per-handler timing rows (forkq_handler_stats): what each master's heartbeat adds for
its children's attempts, and what the dashboard reads back (supervisor/timing.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from supervisor.store.core import PURGE_CHUNK, TIMING_SCHEMA_VERSION, StoreCore, micros
from supervisor.timing import BUCKETS, Stats

BUCKET_COLUMNS = tuple(f"b{i:02d}" for i in range(BUCKETS))


class TimingOps(StoreCore):
    """Per-handler counts and duration histograms, one row per minute, handler and host."""

    def has_timing_table(self) -> bool:
        """Is the schema version 11 or later? (older schemas write no timing)"""
        return self.schema_at_least(TIMING_SCHEMA_VERSION)

    def record_handler_stats(self, minute: float, host: str, stats: Mapping[str, Stats]) -> int:
        """Add {handler: Stats} to `minute` (epoch seconds) for this host, in one
        transaction, sorted (two masters never deadlock); how many handlers were written
        (0 on a schema without the table: the counts are dropped)."""
        if not stats or not self.has_timing_table():
            return 0

        def attempt() -> int:
            with self._tx():
                for handler, one in sorted(stats.items()):
                    params = self._params(minute=minute, handler=handler[:191], host=host)
                    params.update(_columns(one))
                    self._execute("record_handler_stats", params)
            return len(stats)

        return self._retrying(attempt)

    def prune_handler_stats(self, older_than: float = 86_400.0) -> int:
        if not self.has_timing_table():
            return 0
        return self._run("prune_handler_stats", age_us=micros(older_than), limit=PURGE_CHUNK)

    def handler_stats(self, seconds: float) -> list[tuple[str, Stats]]:
        """Per handler, summed over minutes and hosts, for the last `seconds` (database clock)."""
        if not self.has_timing_table():
            return []
        rows = self._rows("web_handler_stats", age_us=micros(seconds))
        return [(str(r["handler"]), _stats(r)) for r in rows]

    def handler_series(self, handler: str, seconds: float) -> list[tuple[float, Stats]]:
        """One handler per minute, summed over hosts, for the last `seconds`, oldest first."""
        if not self.has_timing_table():
            return []
        rows = self._rows("web_handler_series", handler=handler, age_us=micros(seconds))
        return [(float(r["minute"]), _stats(r)) for r in rows]


def _columns(stats: Stats) -> dict[str, Any]:
    return {
        "jobs": stats.jobs,
        "failed": stats.failed,
        "seconds": stats.seconds,
        "fastest": stats.fastest,
        "slowest": stats.slowest,
        **dict(zip(BUCKET_COLUMNS, stats.buckets, strict=True)),
    }


def _stats(row: Mapping[str, Any]) -> Stats:
    fastest, slowest = row["fastest"], row["slowest"]
    return Stats(
        jobs=int(row["jobs"] or 0),
        failed=int(row["failed"] or 0),
        seconds=float(row["seconds"] or 0.0),
        fastest=None if fastest is None else float(fastest),
        slowest=None if slowest is None else float(slowest),
        buckets=[int(row[c] or 0) for c in BUCKET_COLUMNS],
    )
