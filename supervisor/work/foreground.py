"""`forkq work`: one worker in the foreground, no master (also the crontab mode of the seeds).

It registers itself in the processes table, beats, and runs the cluster chores when
it holds their lease, so a setup made only of `forkq work --burst` from cron still
gets expired leases reaped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Sequence
from types import FrameType

from supervisor import events, logs
from supervisor.cluster.chores import Chores
from supervisor.cluster.promote import PROMOTE_INTERVAL, keep_schedule_of
from supervisor.config import Config
from supervisor.errors import ConfigError, ConnectionLost, DatabaseError, ExitCode, SchemaError
from supervisor.kinds import Role
from supervisor.models import JobRow, JobState
from supervisor.outcomes import Outcome
from supervisor.proc import hostname, node_id, process_name, set_title
from supervisor.store import Store, open_store
from supervisor.work.command import load_handlers
from supervisor.work.descendants import become_subreaper, kill_leftovers
from supervisor.work.events import NoEvents
from supervisor.work.guards import interrupt_for_cancel
from supervisor.work.worker import Worker

IDLE_SLEEP_MAX = 1.0  # seconds between polls of an empty queue at most
CANCEL_INTERVAL = 1.0  # seconds between looks at the running job's state (SPEC: 2 s)


class TitleEvents(NoEvents):
    def __init__(self, label: str) -> None:
        self.label = label
        self.running: int | None = None  # the job whose handler runs now (CancelWatch)

    def job_started(self, job: JobRow, timeout: float) -> None:
        set_title(f"forkq: {self.label} job {job.id} ({job.handler})")
        self.running = job.id

    def job_ran(self, job: JobRow) -> None:
        self.running = None

    def job_finished(self, job: JobRow, outcome: Outcome) -> None:
        kill_leftovers(job.id)  # a job owns its descendants: they end with it, as in a pool

    def idle(self) -> None:
        set_title(f"forkq: {self.label} idle")


class CancelWatch(threading.Thread):
    """No master stops a job cancelled while `forkq work` runs it: this thread asks the
    running job's state once a second (CANCEL_INTERVAL), on a connection of its own, and
    interrupts the handler as its soft timeout does (a command's program tree is killed).
    The worker then finds the row cancelling and ends it cancelled (Outbox.ends_cancels)."""

    def __init__(self, config: Config, titles: TitleEvents) -> None:
        super().__init__(name="forkq-cancel-watch", daemon=True)
        self.config, self.titles = config, titles
        self.timeout = config.supervisor.db_session_timeout
        self.stopped = threading.Event()

    def run(self) -> None:
        store: Store | None = None
        while not self.stopped.wait(CANCEL_INTERVAL):
            job_id = self.titles.running
            if job_id is None:
                continue
            try:
                store = store or open_store(self.config.database, session_timeout=self.timeout)
                if store.job_state(job_id) == JobState.CANCELLING and self.titles.running == job_id:
                    interrupt_for_cancel()
            except DatabaseError:  # asked again in a second, on a new connection
                self.close(store)
                store = None
        self.close(store)

    @staticmethod
    def close(store: Store | None) -> None:
        if store is not None:
            with contextlib.suppress(DatabaseError):
                store.close()


def run_foreground(
    config: Config, queues: Sequence[str] | None, max_jobs: int | None, burst: bool
) -> int:
    load_handlers(config)
    store = open_store(config.database, session_timeout=config.supervisor.db_session_timeout)
    try:
        store.require_latest_schema()  # its claims and chores read what the latest adds
    except SchemaError as exc:  # an operator's step, as for `forkq run`: one line, exit 78
        raise ConfigError(f"{exc} ({config.database.redacted()})") from exc
    names = list(queues or [p.name for p in config.pools])
    owner = process_name()
    label = f"{','.join(names)} worker"
    titles = TitleEvents(label)
    worker = Worker(store, config, names, owner, titles)
    worker.max_jobs = max_jobs
    worker.outbox.ends_cancels = True  # no master here to end a cancelled job
    become_subreaper()  # what a job leaves behind comes to us (kill_leftovers)
    watch = CancelWatch(config, titles)
    watch.start()
    log = logs.get(role=Role.WORKER, queues=names)
    _stop_on_signals(worker)
    duties = Duties(worker, config, names)
    pool = ",".join(names)[:64]
    store.register_process(owner, hostname(), os.getpid(), Role.WORKER, pool=pool, node=node_id())
    log.info(events.WORKER_STARTED, owner=owner, burst=burst, max_jobs=max_jobs)
    try:
        _work(worker, duties, burst)
    finally:
        watch.stopped.set()
        _leave(worker, duties.chores, store)
    log.info(events.WORKER_STOPPED, jobs=worker.stats.jobs)
    return int(ExitCode.OK)


def _stop_on_signals(worker: Worker) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        worker.stopping = True  # finish the current job, hand back the rest

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


class Duties:
    """What a lone worker does between jobs, each on its own period of the monotonic clock:
    beat, run the cluster chores, promote its queues' jobs about to fall due."""

    def __init__(self, worker: Worker, config: Config, names: list[str]) -> None:
        self.worker = worker
        self.config = config
        self.names = names
        self.chores = Chores(worker.store, config)
        self.next_beat = self.next_chores = self.next_promote = 0.0

    def run_due(self, now: float) -> None:
        worker, store, settings = self.worker, self.worker.store, self.config.supervisor
        if now >= self.next_beat:
            self.next_beat = now + settings.heartbeat_interval
            worker.safely(lambda: store.beat([worker.owner]))
        if now >= self.next_chores:
            self.next_chores = now + settings.check_interval
            worker.safely(lambda: self.chores.run().reaped)
        if now >= self.next_promote:  # no master here to promote the jobs about to fall due
            self.next_promote = now + PROMOTE_INTERVAL
            worker.safely(lambda: keep_schedule_of(store, self.names))


def _work(worker: Worker, duties: Duties, burst: bool) -> None:
    """Run jobs until stopped, past `max_jobs`, or (burst) with nothing left to do."""
    idle_sleep = duties.config.supervisor.poll_interval
    while not worker.stopping:
        duties.run_due(time.monotonic())
        done = worker.safely(worker.work_once)
        if worker.max_jobs is not None and worker.stats.jobs >= worker.max_jobs:
            break
        if done or worker.backoff:
            idle_sleep = duties.config.supervisor.poll_interval
            continue
        if burst and not worker.held and not worker.pending:
            break
        worker.events.idle()
        worker.sleep(idle_sleep)
        idle_sleep = min(IDLE_SLEEP_MAX, idle_sleep * 2)


def _leave(worker: Worker, chores: Chores, store: Store) -> None:
    """Write what is pending, hand back the rest, give up the chores and deregister."""
    worker.shutdown()
    try:
        chores.release()
        store.remove_processes([worker.owner])
    except ConnectionLost:
        pass
    store.close()
