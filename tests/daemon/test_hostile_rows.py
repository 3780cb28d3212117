"""Rows written by a careless or hostile producer, run by the real daemon (issue 12, item 12).

Any program that can INSERT into forkq_jobs can put NUL and control characters in a
handler name, a unique key or a payload. The worker's process title, its log lines
and its error text all carry the handler name; none of them may crash the child. A
handler name no module registered ends the job `dead` with the reason, on its first
attempt, and the pool goes on with the next job.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from daemon_util import Daemon, daemons_fixture, record_ids  # noqa: F401 - fixture
from util import python, sql, subprocess_env, wait_until

from supervisor import events
from supervisor.models import JobRow, JobState
from supervisor.store import open_store

pytestmark = pytest.mark.timeout(120)

QUEUE = "work"
NUL_HANDLER = "t.noop\x00; rm -rf /"
CONTROL_HANDLER = "t.\x1b]0;owned\x07\x1b[2J\r\n\x9bX"


def insert(db_url: str, handler: str, payload: str, unique_key: str | None = None) -> int:
    """One row as a producer in another language writes it, bound parameters only."""
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload, unique_key) VALUES (?, ?, ?, ?)",
        (QUEUE, handler, payload, unique_key),
    )
    return int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])  # one writer: this test


def job(db_url: str, job_id: int) -> JobRow | None:
    store = open_store(db_url)
    try:
        return store.get_job(job_id)
    finally:
        store.close()


def test_control_characters_in_a_row_never_crash_a_worker(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    nul = insert(db_url, NUL_HANDLER, "{}")
    control = insert(db_url, CONTROL_HANDLER, "{}")
    escaped_payload = insert(db_url, "t.noop", '{"a": "\\u0000\\u001b[2J"}', "key\x00\x1b\r")
    raw_payload = insert(db_url, "t.noop", '{"a": "\x00\x1b"}')
    not_a_number = insert(db_url, "t.noop", '{"n": NaN, "i": -Infinity}')  # no JSON: PHP says so
    too_large = insert(db_url, "t.noop", '{"a": 1e999999}')  # read as Infinity, which is no JSON
    good = insert(db_url, "t.noop", "{}")
    daemon = daemons(pools={QUEUE: {"workers": 1, "timeout": 10}}).start()

    def finished() -> dict[int, Any]:
        ids = (nul, control, escaped_payload, raw_payload, not_a_number, too_large, good)
        rows = {i: job(db_url, i) for i in ids}
        states = {i: None if row is None else row.status for i, row in rows.items()}
        return rows if all(s in (None, JobState.DEAD) for s in states.values()) else {}

    rows = wait_until(finished, timeout=60, message="every hostile row settled")
    assert rows[good] is None and rows[escaped_payload] is None  # done (and deleted)
    for job_id in (nul, control):
        row = rows[job_id]
        assert row is not None and row.status == JobState.DEAD
        assert row.attempts == 1, f"job {job_id} took {row.attempts} attempts"
        assert (row.last_error or "").startswith("unknown handler "), row.last_error
        assert row.handler in (NUL_HANDLER, CONTROL_HANDLER)  # the row itself is untouched
    assert "\\x00" in (rows[nul].last_error or "")  # the reason shows the NUL, escaped
    raw = rows[raw_payload]
    assert raw is not None and raw.status == JobState.DEAD and raw.attempts == 1
    assert "payload is not valid JSON" in (raw.last_error or "")
    nan = rows[not_a_number]
    assert nan is not None and nan.status == JobState.DEAD and nan.attempts == 1
    assert "payload is not valid JSON: NaN is not JSON" in (nan.last_error or ""), nan.last_error
    large = rows[too_large]
    assert large is not None and large.status == JobState.DEAD, large
    assert "the number 1e999999 is too large for a float" in (large.last_error or "")
    assert daemon.events(events.CHILD_CRASHED) == [], daemon.events(events.CHILD_CRASHED)
    assert daemon.events(events.CHILD_FAILED_AT_START) == []
    assert len(daemon.events(events.CHILD_SPAWNED)) == 1  # one child did all of it
    assert daemon.stop() == 0, daemon.describe()


def test_a_text_run_at_ends_dead_with_its_reason_and_the_pool_goes_on(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    """SQLite keeps a raw INSERT's `datetime('now')` as TEXT, which sorts after every
    number: the job never fell due, read as ready at 1970 and, while it was its queue's
    only ready job, had the poll wake a child for nothing every poll. A run_at in
    milliseconds never fell due either, without a word."""
    if not db_url.startswith("sqlite"):
        pytest.skip("MySQL's DATETIME column converts or refuses text: it holds no such row")
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload, run_at) VALUES (?, ?, ?, datetime('now'))",
        (QUEUE, "t.noop", "{}"),
    )
    untimed = int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])
    # A JavaScript producer's Date.now(): milliseconds, read as the year 58,000 and more.
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload, run_at)"
        " VALUES (?, ?, ?, strftime('%s', 'now') * 1000.0)",
        (QUEUE, "t.noop", "{}"),
    )
    millis = int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])
    daemon = daemons(pools={QUEUE: {"workers": 1, "timeout": 10}}).start()

    def ended() -> bool:
        rows = [job(db_url, untimed), job(db_url, millis)]
        return all(row is not None and row.status == JobState.DEAD for row in rows)

    wait_until(ended, timeout=30, message="the untimed jobs ended dead")
    for job_id in (untimed, millis):
        row = job(db_url, job_id)
        assert row is not None and "run_at is not a number of seconds" in (row.last_error or "")
        [(written,)] = sql(db_url, "SELECT quote(run_at) FROM forkq_jobs WHERE id = ?", (job_id,))
        assert (row.last_error or "").endswith(f"(it holds {written})")  # shows read it as 1970
    good = insert(db_url, "t.noop", "{}")
    wait_until(lambda: job(db_url, good) is None, timeout=30, message="the next job ran")
    assert daemon.stop() == 0, daemon.describe()


def test_text_in_a_number_column_ends_its_job_dead_and_every_reader_goes_on(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Any
) -> None:
    """SQLite takes any type in any column: a PHP form's empty `max_attempts`, a priority
    of 'high'. Such a row crashed every child that claimed it, then the master settling
    it, and the master at every start after (a restart loop: every queue down); `forkq
    jobs` and `show` failed on it, and on a status no forkq writes. Now the job ends dead
    with the reason, the daemon goes on, and the CLI lists every row as it is."""
    if not db_url.startswith("sqlite"):
        pytest.skip("MySQL's INT and ENUM-like columns refuse or convert text at INSERT")
    columns = {"max_attempts": "", "priority": "high", "attempts": "three"}
    odd = {}
    for column, value in columns.items():
        sql(
            db_url,
            f"INSERT INTO forkq_jobs (queue, handler, payload, {column}) VALUES (?, ?, ?, ?)",
            (QUEUE, "t.noop", "{}", value),
        )
        odd[column] = int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload, status) VALUES (?, ?, ?, 'pending')",
        (QUEUE, "t.noop", "{}"),
    )
    pending = int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])
    daemon = daemons(pools={QUEUE: {"workers": 1, "timeout": 10}}).start()

    def ended() -> bool:
        rows = [job(db_url, i) for i in odd.values()]
        return all(row is not None and row.status == JobState.DEAD for row in rows)

    wait_until(ended, timeout=30, message="the unreadable rows ended dead")
    for column, job_id in odd.items():
        row = job(db_url, job_id)
        assert row is not None and row.attempts == 1, (column, row)
        error = row.last_error or ""
        assert error.startswith("the row cannot be read: ") and column in error, error
    good = insert(db_url, "t.noop", "{}")
    wait_until(lambda: job(db_url, good) is None, timeout=30, message="the next job ran")
    assert daemon.events(events.CHILD_CRASHED) == [] and daemon.events(events.MASTER_CRASHED) == []
    assert daemon.stop() == 0, daemon.describe()
    row = job(db_url, pending)  # no claim takes it; every reader reads it as it is
    assert (
        row is not None
        and row.status == "pending"
        and "no status of forkq's" in str(row.unreadable)
    )
    listed = subprocess.run(
        [python(), "-m", "supervisor", "jobs", "--json"],
        env=subprocess_env(db_url), capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert {j["id"]: j["status"] for j in json.loads(listed.stdout)}[pending] == "pending"


def test_a_payload_of_bytes_that_are_no_utf8_ends_dead_and_its_queue_goes_on(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Any
) -> None:
    """SQLite keeps a raw INSERT's bytes as TEXT, UTF-8 or not: reading the row failed in
    the driver, so every child that claimed it crashed (the pool crash-looped, its good
    jobs waited, those claimed beside it were charged an attempt) and `forkq jobs`
    failed. Now that job alone ends dead, saying why, and the CLI lists it."""
    if not db_url.startswith("sqlite"):
        pytest.skip("MariaDB refuses bytes that are no UTF-8 at INSERT (error 1366)")
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload) VALUES (?, ?, CAST(? AS TEXT))",
        (QUEUE, "t.noop", b'{"a":"\x80\xff"}'),
    )
    bad = int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])
    good = insert(db_url, "t.noop", "{}")
    daemon = daemons(pools={QUEUE: {"workers": 1, "timeout": 10}}).start()
    wait_until(lambda: job(db_url, good) is None, timeout=30, message="the good job ran")
    row = wait_until(
        lambda: (r := job(db_url, bad)) is not None and r.status == JobState.DEAD and r,
        timeout=30,
        message="the bad job ended dead",
    )
    assert row.attempts == 1 and "payload is not valid UTF-8 text" in (row.last_error or "")
    assert (
        daemon.events(events.CHILD_CRASHED) == []
        and daemon.events(events.CHILD_FAILED_AT_START) == []
    )
    assert daemon.stop() == 0, daemon.describe()
    listed = subprocess.run(
        [python(), "-m", "supervisor", "jobs", "--json"],
        env=subprocess_env(db_url), capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [j["status"] for j in json.loads(listed.stdout) if j["id"] == bad] == ["dead"]


def test_a_running_row_without_a_lease_ends_dead_and_retries_as_any_other(
    daemons: Callable[..., Daemon], db_url: str
) -> None:
    """A raw INSERT with status 'running' and no lease (forkq writes none) sat there for
    good: no worker held it, so no lease could run out, and it was neither run nor ended."""
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload, status) VALUES (?, ?, ?, 'running')",
        (QUEUE, "t.noop", "{}"),
    )
    unleased = int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])
    daemon = daemons(pools={QUEUE: {"workers": 1, "timeout": 10}}).start()

    def ended() -> JobRow | None:
        row = job(db_url, unleased)
        return row if row is not None and row.status == JobState.DEAD else None

    row = wait_until(ended, timeout=30, message="the unleased row ended dead")
    assert "status 'running' with no lease" in (row.last_error or ""), row.last_error
    store = open_store(db_url)
    try:
        assert store.retry_jobs([unleased]) == 1  # what `forkq retry` does
    finally:
        store.close()
    wait_until(lambda: job(db_url, unleased) is None, timeout=30, message="the retried job ran")
    assert daemon.stop() == 0, daemon.describe()


def test_a_payload_bound_as_bytes_runs_as_the_text_it_holds(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Any
) -> None:
    """A driver that binds bytes (Python's bytes, Go's []byte) writes a BLOB on SQLite:
    its job ended dead with "cannot use a string pattern on a bytes-like object", and the
    CLI listed the payload as b'...'. Valid UTF-8 runs as the text it is; other bytes end
    the job dead as not UTF-8 text."""
    record = tmp_path / "record.txt"
    payload = json.dumps({"file": str(record)}).encode()
    sql(
        db_url,
        "INSERT INTO forkq_jobs (queue, handler, payload) VALUES (?, ?, ?)",
        (QUEUE, b"t.record", payload),
    )
    good = int(sql(db_url, "SELECT MAX(id) FROM forkq_jobs")[0][0])
    listed = subprocess.run(
        [python(), "-m", "supervisor", "show", str(good), "--json"],
        env=subprocess_env(db_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shown = json.loads(listed.stdout)
    assert (shown["handler"], json.loads(shown["payload"])) == ("t.record", {"file": str(record)})
    bad = insert(db_url, "t.noop", "{}")
    if db_url.startswith("sqlite"):  # MariaDB's utf8mb4 column refuses such bytes itself
        sql(db_url, "UPDATE forkq_jobs SET payload = ? WHERE id = ?", (b'{"a": "\xff"}', bad))
    daemon = daemons(pools={QUEUE: {"workers": 1, "timeout": 10}}).start()
    wait_until(lambda: record_ids(record) == [good], timeout=30, message="the bytes job ran")

    def bad_ended() -> JobRow | None:
        row = job(db_url, bad)
        return row if row is not None and row.status == JobState.DEAD else None

    if db_url.startswith("sqlite"):
        row = wait_until(bad_ended, timeout=30, message="the non-UTF-8 job ended dead")
        assert "payload is not valid UTF-8 text" in (row.last_error or ""), row.last_error
    assert daemon.stop() == 0, daemon.describe()
