"""The store: every business operation on the database, written once over named queries.

A backend (mysql.py, sqlite.py) supplies the connection, the transaction, the
translation of driver errors into forkq's own, and how values are bound; `Store`
holds the operations. Callers never see a cursor.

The operations come in one mixin a concern, each over the core's plumbing (core.py):
the job lifecycle (jobs.py, over dependencies.py: jobs that wait on others, and
batches.py: the hook that settles a batch), operators' calls (operators.py), what the
daemons share
(cluster.py) and the dashboard's reads (views.py). This module puts them together and
keeps every name importable from here. A state change of a claimed job always repeats
its precondition (jobs.py), so a worker whose lease was taken over never overwrites the
new holder.
"""

from __future__ import annotations

from supervisor.store.cluster import ClusterOps
from supervisor.store.jobs import JobOps
from supervisor.store.operators import OperatorOps
from supervisor.store.results import ResultOps
from supervisor.store.schedules import ScheduleOps
from supervisor.store.timing import TimingOps
from supervisor.store.views import ViewOps


class Store(JobOps, OperatorOps, ClusterOps, ScheduleOps, TimingOps, ViewOps, ResultOps):
    """One database connection (opened lazily, reopened after a fork or a loss)."""
