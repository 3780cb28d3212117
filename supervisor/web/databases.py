"""The dashboard over several databases (`[databases.NAME]`): a store per database and
serving thread, each database's own config, which ones answer, and `NAME:ID` in job URLs.

Pages show one database at a time (`?db=NAME`, the home one when absent) and the overview
sums up every one; a database that does not answer is named on every page (never its
URL's password) while the others are served as usual. With one database nothing shows.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from werkzeug.routing import BaseConverter, ValidationError

from supervisor.config import Config
from supervisor.config.model import HOME_DATABASE
from supervisor.errors import DatabaseError, ForkqError
from supervisor.jobref import JobRef, parse_job_ref
from supervisor.registry import queue_of
from supervisor.status import missing_sqlite, why_down
from supervisor.store import Store, open_store

DB_TIMEOUT = 30.0  # seconds a page waits on the database
HEALTH_FOR = 5.0  # seconds a database's answer is trusted before asking again
# ... and its silence: a server that drops packets costs a connect timeout (5 s) to ask,
# so a database down is asked less often than one up.
DOWN_FOR = 30.0
# Asking whether a database answers costs every page (the banner): a connection of its own
# with a short timeout, never the page's (a server that accepts and then says nothing
# would hold each page DB_TIMEOUT seconds).
PROBE_TIMEOUT = 3.0


class JobRefConverter(BaseConverter):
    """`/jobs/42` (home) or `/jobs/reports:42`: a JobRef; anything else (an id past 2^63,
    a bad name) is no job: 404, never 500."""

    regex = r"(?:[A-Za-z0-9_]{1,64}:)?[0-9]{1,19}"

    def to_python(self, value: str) -> JobRef:
        try:
            return parse_job_ref(value)
        except ValueError:
            raise ValidationError() from None

    def to_url(self, value: Any) -> str:
        if isinstance(value, JobRef):
            return str(value)
        return str(int(value))


class Databases:
    """Every database the config names, the home one first."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.names = [name for name, _ in config.every_database()]
        self.several = len(self.names) > 1
        # A schedule without a queue belongs where its handler's queue lives (registry.py:
        # the handlers are loaded before the dashboard is made).
        self._configs = {
            n: config.for_database(n, queue_of) if self.several else config for n in self.names
        }
        self._local = threading.local()
        self._lock = threading.Lock()
        self._health: dict[str, tuple[float, str | None]] = {}  # name: (checked at, problem)

    def config_of(self, name: str) -> Config:
        return self._configs[name]

    def store(self, name: str = HOME_DATABASE) -> Store:
        stores: dict[str, Store] = self._local.__dict__.setdefault("stores", {})
        store = stores.get(name)
        url = self.config_of(name).database
        missing = missing_sqlite(url)  # a stat: an open connection would read a moved file
        if missing is not None:
            if store is not None:
                self.failed(name, missing)
            raise DatabaseError(missing)
        if store is None:
            store = open_store(url, timeout=DB_TIMEOUT)
            stores[name] = store
        return store

    def why(self, name: str, exc: BaseException) -> str:
        """Why `name` did not answer, in one line, never with its password."""
        return why_down(exc, self.config_of(name).database)

    def failed(self, name: str, problem: str) -> None:
        """`name` did not answer: this thread reconnects next time; pages name it down."""
        stores: dict[str, Store] = self._local.__dict__.setdefault("stores", {})
        store = stores.pop(name, None)
        if store is not None:
            with contextlib.suppress(Exception):  # closing a connection that already broke
                store.close()
        with self._lock:
            self._health[name] = (time.monotonic(), problem)

    def answered(self, name: str) -> None:
        with self._lock:
            self._health[name] = (time.monotonic(), None)

    def down(self) -> dict[str, str]:
        """The databases that do not answer (asked at most every HEALTH_FOR seconds), with
        why, in the config's order; {} with one database (its page says it)."""
        if not self.several:
            return {}
        found = {}
        for name in self.names:
            problem = self._problem(name)
            if problem is not None:
                found[name] = problem
        return found

    def known_down(self, name: str) -> str | None:
        """Why `name` still does not answer when it did not a moment ago (asked again, with
        PROBE_TIMEOUT: a page of it is refused at once, never held DB_TIMEOUT seconds,
        and served as soon as it is back); None when it answers or was not known down."""
        with self._lock:
            cached = self._health.get(name)
        if cached is None or cached[1] is None:
            return None
        return self._probe(name)

    def _problem(self, name: str) -> str | None:
        now = time.monotonic()
        with self._lock:
            cached = self._health.get(name)
        if cached is not None and now - cached[0] < (HEALTH_FOR if cached[1] is None else DOWN_FOR):
            return cached[1]
        return self._probe(name)

    def _probe(self, name: str) -> str | None:
        """Ask `name` now and remember the answer: why it is down, or None."""
        try:
            self._ask(name)
        except ForkqError as exc:
            problem = self.why(name, exc)
            self.failed(name, problem)
            return problem
        self.answered(name)
        return None

    def _ask(self, name: str) -> None:
        """Raise ForkqError unless `name` answers within PROBE_TIMEOUT seconds."""
        url = self.config_of(name).database
        missing = missing_sqlite(url)
        if missing is not None:  # opening it would create an empty file
            raise DatabaseError(missing)
        store = open_store(url, timeout=PROBE_TIMEOUT)
        try:
            store.db_now()
        finally:
            with contextlib.suppress(Exception):  # closing a connection that broke
                store.close()

    def summary(self, cap: int) -> list[dict[str, Any]]:
        """The overview's line per database: its queues' totals, processes and firing
        alerts, or why it does not answer; [] with one database."""
        if not self.several:
            return []
        lines: list[dict[str, Any]] = []
        for name in self.names:
            line: dict[str, Any] = {"name": name, "problem": self._problem(name)}
            if line["problem"] is None:
                try:
                    line.update(self._totals(name, cap))
                except ForkqError as exc:
                    problem = line["problem"] = self.why(name, exc)
                    self.failed(name, problem)
            lines.append(line)
        return lines

    def _totals(self, name: str, cap: int) -> dict[str, Any]:
        store = self.store(name)
        stats = store.stats(cap, queues=[p.name for p in self.config_of(name).pools])
        alerts = store.load_alerts().values()
        return {
            "queues": len(stats),
            **{k: sum(getattr(q, k) for q in stats) for k in ("ready", "running", "dead")},
            "processes": len(store.list_processes()),
            "firing": sum(1 for a in alerts if a["state"] == "firing"),
        }
