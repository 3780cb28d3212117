"""Jobs that wait on other jobs: the spec `q.job(...)` builds for `q.chain([...])` and
`q.group([...]).then(...)`, and the checks of `depends_on` (SPEC "Composing jobs").

Nothing here writes: Queue (queue.py) turns specs into rows, and the store
(store/dependencies.py) makes a child wait and releases it when its parents end.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from supervisor.errors import UsageError
from supervisor.store.dependencies import MOST_PARENTS, ON_PARENT_FAILURE


@dataclass(frozen=True)
class JobSpec:
    """One job not enqueued yet: `q.job("report.build", {"day": 3}, queue="reports")`.

    `options` are enqueue's keyword arguments (queue, delay, run_at, priority,
    max_attempts, limit_key, group_key, tags, depends_on, on_parent_failure)."""

    handler: str
    payload: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)


def as_spec(spec: JobSpec | Mapping[str, Any]) -> JobSpec:
    """A JobSpec, or a dict as enqueue_many takes one ({"handler": ..., "payload": ...})."""
    if isinstance(spec, JobSpec):
        return spec
    if isinstance(spec, Mapping) and "handler" in spec:
        rest = {k: v for k, v in spec.items() if k not in ("handler", "payload")}
        return JobSpec(spec["handler"], spec.get("payload"), rest)
    raise UsageError("a job spec is q.job(handler, payload, **options) or a dict with 'handler'")


def checked_parents(depends_on: Any, on_parent_failure: Any) -> list[int]:
    """`depends_on` as a list of job ids, and `on_parent_failure` checked."""
    if on_parent_failure not in ON_PARENT_FAILURE:
        raise UsageError(f"on_parent_failure must be one of {', '.join(ON_PARENT_FAILURE)}")
    if depends_on is None:
        return []
    if isinstance(depends_on, str | bytes) or not isinstance(depends_on, Sequence):
        raise UsageError("depends_on must be a list of job ids")
    if len(depends_on) > MOST_PARENTS or not all(
        isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in depends_on
    ):
        raise UsageError(f"depends_on: up to {MOST_PARENTS} job ids (positive integers)")
    return list(dict.fromkeys(depends_on))


class Enqueuer(Protocol):
    """What a Group needs of the Queue that made it."""

    def enqueue_specs(self, specs: Sequence[JobSpec], chained: bool) -> Sequence[int]: ...


class Group:
    """Jobs enqueued together, to wait on as one: `q.group([...]).then(q.job(...))`."""

    def __init__(self, queue: Enqueuer, ids: Sequence[int]) -> None:
        self.queue = queue
        self.ids = list(ids)

    def then(self, spec: JobSpec | Mapping[str, Any]) -> int:
        """Enqueue `spec` to run once every job of the group is done (its own depends_on
        kept); its id."""
        spec = as_spec(spec)
        own = checked_parents(spec.options.get("depends_on"), "cancel")
        options = {**spec.options, "depends_on": [*self.ids, *own]}
        return self.queue.enqueue_specs([JobSpec(spec.handler, spec.payload, options)], False)[0]

    def __iter__(self) -> Iterator[int]:
        """Its job ids, in the order given (`ids` holds them too)."""
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"<group of jobs {self.ids}>"
