"""The producer storm: 8 producers enqueue while a daemon with 8 workers drains, on a stock
private MariaDB (its default isolation, REPEATABLE READ, for every session that does not
choose another).

6 producers go through `Queue.enqueue`, 2 send the documented one-line INSERT on plain
PyMySQL connections with the server's defaults and no retry loop, as a PHP or Ruby app
does: a deadlock there is a lost enqueue the app has to handle, so none may fail. Each
producer is a process of its own (tests/storm_producer.py) and they start together.

Run with `pytest -m faults -s tests/faults/test_faults_storm.py` to see the figures: failed
enqueues per producer, the server's deadlock count over the storm, how long it took.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from daemon_util import Daemon, count_lines, record_ids
from private_mariadb import (  # noqa: F401 - fixtures
    PrivateMariaDB,
    private_db_url,
    private_mariadb,
)
from util import dies_with_us, subprocess_env, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]

PRODUCER = Path(__file__).resolve().parents[1] / "storm_producer.py"
QUEUE = "work"
# 50,000 jobs, as in the report: the producers take about 30-40 s on 2 shared cores with
# the daemon and the server beside them, and the drain ends a few seconds after them.
TOTAL = 50_000
MODES = ["queue"] * 6 + ["raw"] * 2
POOL = {"workers": 8, "max_workers": 8, "timeout": 60}


@pytest.fixture
def daemon(tmp_path: Path, private_db_url: str) -> Iterator[Daemon]:  # noqa: F811
    made = Daemon(tmp_path / "daemon", private_db_url, pools={QUEUE: POOL})
    yield made
    made.kill_all()


def innodb_deadlocks(server: PrivateMariaDB) -> int:
    rows = server.admin("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
    return int(rows[0][1])


def job_counts(server: PrivateMariaDB) -> dict[str, int]:
    rows = server.admin(
        f"SELECT status, COUNT(*) FROM `{server.database}`.forkq_jobs GROUP BY status"
    )
    return {str(status): int(n) for status, n in rows}


def start_producers(url: str, record: Path, results: Path) -> list[subprocess.Popen[str]]:
    """Every producer connected and waiting; then all are told to go at once."""
    share, extra = divmod(TOTAL, len(MODES))
    procs = []
    for number, mode in enumerate(MODES):
        count = share + (1 if number < extra else 0)
        result = results / f"{number}.json"
        command = [sys.executable, str(PRODUCER), mode, url, str(count), str(record), str(result)]
        procs.append(
            subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=subprocess_env(url),
                cwd=PRODUCER.parent,
                preexec_fn=dies_with_us(signal.SIGTERM),
            )
        )
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return procs


def finish_producers(procs: list[subprocess.Popen[str]], results: Path) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 300
    for proc in procs:
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        assert code == 0, f"a producer exited with {code}"
    return [
        json.loads((results / f"{number}.json").read_text(encoding="utf-8"))
        for number in range(len(procs))
    ]


def test_producer_storm_loses_no_enqueue_to_deadlocks_and_runs_every_job(
    private_mariadb: PrivateMariaDB,  # noqa: F811
    private_db_url: str,  # noqa: F811
    daemon: Daemon,
    tmp_path: Path,
) -> None:
    record = tmp_path / "record.csv"
    results = tmp_path / "results"
    results.mkdir()
    isolation = private_mariadb.admin("SELECT @@GLOBAL.tx_isolation")[0][0]
    assert isolation == "REPEATABLE-READ", "a stock server: the producers keep its default"
    daemon.start().wait_ready()
    deadlocks_before = innodb_deadlocks(private_mariadb)
    started = time.monotonic()

    procs = start_producers(private_db_url, record, results)
    try:
        outcomes = finish_producers(procs, results)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    enqueued_in = time.monotonic() - started
    ids = [job_id for outcome in outcomes for job_id in outcome["ids"]]
    failed = [outcome["failed"] for outcome in outcomes]

    wait_until(
        lambda: count_lines(record) >= len(ids) and not job_counts(private_mariadb),
        timeout=300,
        interval=0.2,
        message=f"{len(ids)} jobs run and forkq_jobs empty (left: {job_counts(private_mariadb)})",
    )
    drained_in = time.monotonic() - started
    deadlocks = innodb_deadlocks(private_mariadb) - deadlocks_before
    runs = Counter(record_ids(record))
    errors: Counter[str] = Counter()
    for outcome in outcomes:
        errors.update(outcome["errors"])
    print(
        f"\n[fault figures] producer storm: jobs={TOTAL}, failed per producer "
        f"{dict(zip([f'{m}{n}' for n, m in enumerate(MODES)], failed, strict=True))}, "
        f"failed={sum(failed)}, server deadlocks={deadlocks}, raw isolation="
        f"{sorted({o['isolation'] for o in outcomes if o['mode'] == 'raw'})}, "
        f"enqueued in {enqueued_in:.1f}s (producers {[o['seconds'] for o in outcomes]}), "
        f"drained in {drained_in:.1f}s, duplicate runs={sum(runs.values()) - len(runs)}"
    )
    for error, count in errors.most_common(5):
        print(f"  {count} x {error}")

    assert sum(failed) == 0, f"failed enqueues per producer: {failed}; {errors.most_common(3)}"
    assert len(ids) == len(set(ids)) == TOTAL
    assert set(runs) == set(ids), (
        f"lost: {len(set(ids) - set(runs))}, never enqueued: {len(set(runs) - set(ids))}"
    )
    assert sum(runs.values()) == len(ids), f"runs {sum(runs.values())} for {len(ids)} enqueues"
    assert daemon.alive(), daemon.describe()
    assert daemon.stop(timeout=30) == 0, daemon.describe()
