"""Dependencies run by real daemons (SPEC "Composing jobs"): a chain runs in order, a
group's `then` after every job of the group (across two daemons), a dead parent cancels
its dependents (and `continue` lets them run), and a handler reads `job.parents`. The
order is the handlers' own records (tests/daemon_util.py's t.record), never the table's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

from daemon_util import HANDLERS_MODULE, Daemon, record_ids
from util import wait_until

from supervisor import Queue, events
from supervisor.store import open_store
from supervisor.store.core import DEPS_SCHEMA_VERSION

PARENTS_SOURCE = '''\
import json
from itertools import pairwise
import os

from supervisor import handler


@handler("t.parents")
def parents(payload, job):
    """Append {"id": ..., "parents": [...]} to payload["file"] in one O_APPEND write."""
    line = (json.dumps({"id": job.id, "parents": job.parents}) + "\\n").encode()
    fd = os.open(payload["file"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@handler("t.square", keep_result=True)
def square(payload, job):
    return payload["n"] * payload["n"]


@handler("t.sum_parents")
def sum_parents(payload, job):
    """Write the parents' kept results to payload["file"]."""
    results = job.parent_results()
    with open(payload["file"], "w") as out:
        json.dump({"results": {str(k): v for k, v in results.items()}}, out)
'''


def records(path: Path) -> list[tuple[int, float, float]]:
    """(id, start, end) of each run in a t.record file, in the order they were written."""
    out = []
    for line in path.read_text().splitlines():
        job_id, _pid, start, end = line.split(",")
        out.append((int(job_id), float(start), float(end)))
    return out


def test_a_chain_of_100_runs_in_order(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    """Three workers could run any ready job at once: each step still starts only after
    the one before it ended."""
    record = tmp_path / "chain.rec"
    daemons(pools={"work": {"workers": 3}}).start().wait_ready()
    q = Queue(db_url)
    try:
        ids = q.chain([q.job("t.record", {"file": str(record)}, queue="work") for _ in range(100)])
        wait_until(lambda: len(record_ids(record)) >= 100, timeout=120, message="the chain ran")
    finally:
        q.close()
    runs = records(record)
    assert [job_id for job_id, _, _ in runs] == ids
    for (_, _, ended), (_, started, _) in pairwise(runs):
        assert started >= ended


def test_group_then_runs_once_after_every_job_of_the_group_across_two_daemons(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    record = tmp_path / "group.rec"
    pools = {"work": {"workers": 2}}
    for name in ("one", "two"):
        daemons(pools=pools, name=name).start().wait_ready()
    q = Queue(db_url)
    try:
        group = q.group([q.job("t.record", {"file": str(record)}, queue="work")] * 200)
        after = group.then(q.job("t.record", {"file": str(record)}, queue="work"))
        wait_until(lambda: after in record_ids(record), timeout=120, message="then ran")
    finally:
        q.close()
    runs = records(record)
    assert sorted(job_id for job_id, _, _ in runs) == sorted([*group.ids, after])
    [then_start] = [start for job_id, start, _ in runs if job_id == after]
    assert then_start >= max(end for job_id, _, end in runs if job_id != after)


def with_parent_handlers(daemons: Callable[..., Daemon]) -> Daemon:
    """A daemon of two workers on `work` with PARENTS_SOURCE's handlers too, ready."""
    daemon = daemons(
        pools={"work": {"workers": 2}},
        supervisor={"handlers": [HANDLERS_MODULE, "parenthandlers"]},
    )
    daemon.write_module("parenthandlers", PARENTS_SOURCE)
    return daemon.start().wait_ready()


def test_a_dead_parent_cancels_its_dependents_and_continue_runs_them(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    record = tmp_path / "after.rec"
    seen = tmp_path / "parents.rec"
    with_parent_handlers(daemons)
    q = Queue(db_url)
    try:
        good = q.enqueue("t.noop", queue="work")
        parent = q.enqueue("t.fail", queue="work", max_attempts=1)
        doomed = q.enqueue("t.record", {"file": str(record)}, queue="work", depends_on=[parent])
        grandchild = q.enqueue("t.record", {"file": str(record)}, depends_on=[doomed])
        going = q.enqueue(
            "t.parents",
            {"file": str(seen)},
            queue="work",
            depends_on=[good, parent],
            on_parent_failure="continue",
        )
        wait_until(seen.exists, timeout=60, message="the continue child ran")
        assert json.loads(seen.read_text()) == {"id": going, "parents": [good, parent]}
        wait_until(lambda: q.get(doomed).status == "cancelled", timeout=20)  # type: ignore[union-attr]
        assert q.get(parent).status == "dead"  # type: ignore[union-attr]
        assert q.get(grandchild).status == "cancelled"  # type: ignore[union-attr]
        assert "parent job" in (q.get(grandchild).last_error or "")  # type: ignore[union-attr]
    finally:
        q.close()
    assert not record.exists()


def test_a_child_reads_its_parents_kept_results(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    """group([...]).then(job): the last job reads what each parent returned (parents whose
    handler keeps its result), in its own handler, from a real daemon."""
    seen = tmp_path / "sum.json"
    daemon = with_parent_handlers(daemons)
    q = Queue(db_url)
    try:
        group = q.group([q.job("t.square", {"n": n}, queue="work") for n in (2, 3, 4)])
        plain = q.enqueue("t.noop", queue="work")  # keeps nothing: left out
        last = q.job("t.sum_parents", {"file": str(seen)}, queue="work", depends_on=[plain])
        group.then(last)
        wait_until(seen.exists, timeout=60, message=f"the last job ran ({daemon.describe()})")
    finally:
        q.close()
    results = json.loads(seen.read_text())["results"]
    assert sorted(results.values()) == [4, 9, 16] and str(plain) not in results


def test_a_child_a_parents_end_missed_is_released_by_the_daemons_chores_and_runs(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    """A parent ended by a store that read the schema before it reached 14 (an old daemon
    of a rolling upgrade: its end settles no child) leaves its child waiting; the
    daemon's check tick sweeps it free (dependents_swept), and it runs once."""
    record = tmp_path / "swept.rec"
    q = Queue(db_url)
    try:
        parent = q.enqueue("t.record", {"file": str(record)}, queue="before")
        child = q.enqueue("t.record", {"file": str(record)}, queue="work", depends_on=[parent])
        old = open_store(db_url)
        old.schema_checked = DEPS_SCHEMA_VERSION - 1  # as read before the upgrade
        try:
            [row] = old.claim("before", "old-host:1:0", 1, 60)
            assert old.complete("old-host:1:0", [row.id], "keep") == 1
        finally:
            old.close()
        assert q.get(child).status == "waiting"  # type: ignore[union-attr]
        daemon = daemons(pools={"work": {"workers": 1}}).start().wait_ready()
        daemon.wait_event(events.DEPENDENTS_SWEPT, timeout=60)
        wait_until(lambda: child in record_ids(record), timeout=60, message="the child ran")
    finally:
        q.close()
    assert record_ids(record) == [child]
