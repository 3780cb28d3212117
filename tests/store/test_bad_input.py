"""Bad input through the producer's and the worker's doors: payloads, raw rows, names.

The rule each test checks: bad input ends in a clear, contained outcome — a job `dead`
with a reason, a usage error — or simply works. It never crashes a worker, never raises
an exception type the caller was not promised, and never touches the tables beyond the
row concerned. Config files and command lines: tests/unit/test_bad_input_cli.py.

Jobs are worked in-process with `Worker.work_once()` (a `forkq work` subprocess per
example would be slow); the handlers registered here record what they received.
Hypothesis runs derandomized, so a run is repeatable and a failure is not a fluke.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog
import util
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from util import connected, count_rows, schema_tables

from supervisor import Queue, registry
from supervisor.config import Config, PoolConfig
from supervisor.dburl import parse_database_url
from supervisor.errors import UsageError
from supervisor.models import JobState
from supervisor.store import Store
from supervisor.work.worker import Worker

pytestmark = pytest.mark.timeout(120, method="thread")  # the worker's soft timeout owns SIGALRM


@pytest.fixture(autouse=True)
def fresh_logging() -> Iterator[None]:
    """An in-process `cli.main` binds structlog to the stdout pytest captured for that test,
    which is closed afterwards: start and end every test with structlog's defaults."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


QUEUE = "bad_input"


def insert_raw(db_url: str, handler: str, payload: Any, queue: str = QUEUE) -> int:
    return util.insert_raw(db_url, handler, payload, queue)


FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Names that break SQL built by string formatting, or a driver's own %-formatting.
HOSTILE_NAMES = [
    "'; DROP TABLE forkq_jobs; --",
    "x' OR '1'='1",
    'say "hi"',
    "back\\slash\\",
    "%s %(queue)s %%",
    ":queue ?",
    "`tick`",
    "ジョブ.送信",
    "emoji 🚀 q",
    "tab\tnew\nline",
    "zero\x00byte",
]

received: list[tuple[int, Any]] = []


def _echo(payload: Any, job: Any) -> None:
    received.append((job.id, payload))


registry.handler("bad.echo", queue=QUEUE)(_echo)
for _name in HOSTILE_NAMES:
    registry.handler(_name, queue=QUEUE)(_echo)


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture
def work(store: Store, db_url: str) -> Iterator[Callable[..., int]]:
    """`work(queue=QUEUE)`: run a worker on `queue` until nothing is due; jobs run."""
    received.clear()

    def run(queue: str = QUEUE) -> int:
        config = Config(
            database=parse_database_url(db_url),
            pools=(PoolConfig(name=queue, timeout=30, on_success="keep"),),
        )
        worker = Worker(store, config, [queue], "test:1:bad-input")
        ran = 0
        for _ in range(100):
            done = worker.work_once()
            if not done:
                return ran
            ran += done
        raise AssertionError("the worker never ran out of due jobs")

    yield run
    received.clear()


def tables_intact(db_url: str) -> None:
    """Every forkq table is still there and answers (one connection, one COUNT each)."""
    with connected(db_url) as conn:
        cursor = conn.cursor()
        for table in schema_tables():
            cursor.execute(f"SELECT COUNT(*) FROM {table}")
            assert cursor.fetchone()[0] >= 0


# --- payloads ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@FUZZ
@given(payload=json_values)
def test_any_json_payload_reaches_the_handler_unchanged(
    queue: Queue, work: Callable[..., int], payload: Any
) -> None:
    received.clear()
    job_id = queue.enqueue("bad.echo", payload, queue=QUEUE)
    assert work() == 1
    assert [(job_id, {} if payload is None else payload)] == received
    assert queue.get(job_id).status == JobState.DONE  # type: ignore[union-attr]


def test_a_five_megabyte_payload_round_trips(queue: Queue, work: Callable[..., int]) -> None:
    big = {"blob": "x" * (5 * 1024 * 1024), "tail": "ü🚀"}
    job_id = queue.enqueue("bad.echo", big, queue=QUEUE)
    assert work() == 1
    assert len(received) == 1 and received[0][0] == job_id
    assert received[0][1] == big


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "not json",
        "{'single': 'quotes'}",
        '{"a": 1,}',
        "[1, 2",
        "\x00",
        "\ufeff{}",
        "{" * 5 + "}" * 5,
        "x" * (5 * 1024 * 1024),  # five megabytes of non-JSON
    ],
    ids=[
        "empty",
        "open-brace",
        "words",
        "single-quotes",
        "trailing-comma",
        "open-list",
        "nul",
        "bom",
        "unbalanced",
        "5MB-of-junk",
    ],
)
def test_a_raw_row_whose_payload_is_not_json_ends_dead_with_the_reason(
    db_url: str, queue: Queue, work: Callable[..., int], text: str
) -> None:
    job_id = insert_raw(db_url, "bad.echo", text)
    assert work() == 1
    assert received == []
    row = queue.get(job_id)
    assert row is not None and row.status == JobState.DEAD
    assert row.last_error and row.last_error.startswith("payload is not valid JSON"), row.last_error
    assert len(row.last_error) < 1000
    tables_intact(db_url)


@pytest.mark.parametrize("text", ["null", "[]", "42", '"just a string"', '{"a": [1, {"b": null}]}'])
def test_a_raw_row_with_any_json_value_runs(
    db_url: str, queue: Queue, work: Callable[..., int], text: str
) -> None:
    job_id = insert_raw(db_url, "bad.echo", text)
    assert work() == 1
    assert [(job_id, json.loads(text))] == received


def test_a_payload_nested_too_deep_to_decode_ends_dead_and_the_worker_lives(
    db_url: str, queue: Queue, work: Callable[..., int]
) -> None:
    job_id = insert_raw(db_url, "bad.echo", "[" * 100_000 + "]" * 100_000)
    assert work() == 1  # RecursionError here today
    row = queue.get(job_id)
    assert row is not None and row.status == JobState.DEAD
    assert row.last_error and "payload" in row.last_error


def test_a_payload_nested_too_deep_to_encode_is_refused_as_usage(queue: Queue, db_url: str) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    try:
        with pytest.raises(UsageError):
            queue.enqueue("bad.echo", deep, queue=QUEUE)
    finally:
        assert count_rows(db_url, "forkq_jobs") == 0


def test_a_payload_with_a_lone_surrogate_is_refused_or_round_trips(
    queue: Queue, work: Callable[..., int]
) -> None:
    try:
        job_id = queue.enqueue("bad.echo", {"s": "\ud800"}, queue=QUEUE)
    except UsageError:
        return
    assert work() == 1
    assert [(job_id, {"s": "\ud800"})] == received


def test_unserialisable_payloads_are_usage_errors(queue: Queue, db_url: str) -> None:
    for payload in ({"when": object()}, {"x": float("nan")}, {1j: 2}, {"s": {1, 2}}):
        with pytest.raises(UsageError):
            queue.enqueue("bad.echo", payload, queue=QUEUE)
    assert count_rows(db_url, "forkq_jobs") == 0


# --- names --------------------------------------------------------------------------------------


def test_hostile_handler_names_run_when_registered_and_die_when_not(
    db_url: str, queue: Queue, work: Callable[..., int]
) -> None:
    for name in HOSTILE_NAMES:
        received.clear()
        registered = queue.enqueue(name, {"n": 1}, queue=QUEUE)
        unknown = queue.enqueue(name + " (nobody registered this)", {"n": 2}, queue=QUEUE)
        raw = insert_raw(db_url, name + "; --", '{"n": 3}')
        assert work() == 3, name
        assert received == [(registered, {"n": 1})], name
        assert queue.get(registered).status == JobState.DONE, name  # type: ignore[union-attr]
        for job_id in (unknown, raw):
            row = queue.get(job_id)
            assert row is not None and row.status == JobState.DEAD, (name, row)
            assert row.last_error and row.last_error.startswith("unknown handler"), row.last_error
    tables_intact(db_url)
    assert count_rows(db_url, "forkq_jobs") == 3 * len(HOSTILE_NAMES)


def test_hostile_queue_names_are_separate_queues(
    db_url: str, queue: Queue, work: Callable[..., int]
) -> None:
    other = queue.enqueue("bad.echo", {"q": "other"}, queue=QUEUE)
    for name in HOSTILE_NAMES:
        received.clear()
        mine = queue.enqueue("bad.echo", {"q": name}, queue=name)
        assert work(name) == 1, name
        assert received == [(mine, {"q": name})], name
        assert queue.get(mine).queue == name  # type: ignore[union-attr]
        queue.store.set_paused(name, True)
    assert queue.get(other).status == JobState.READY  # type: ignore[union-attr]
    assert queue.store.paused_queues() == set(HOSTILE_NAMES)
    assert {s.queue for s in queue.store.stats()} == {*HOSTILE_NAMES, QUEUE}
    tables_intact(db_url)


def test_names_too_long_for_their_columns_are_usage_errors(queue: Queue, db_url: str) -> None:
    with pytest.raises(UsageError):
        queue.enqueue("h" * 192, {}, queue=QUEUE)
    with pytest.raises(UsageError):
        queue.enqueue("bad.echo", {}, queue="q" * 65)
    with pytest.raises(UsageError):
        queue.enqueue("bad.echo", {}, queue=QUEUE, unique_key="k" * 192)
    assert count_rows(db_url, "forkq_jobs") == 0


def test_a_time_past_what_the_backend_holds_is_refused_before_any_write(
    queue: Queue, db_url: str
) -> None:
    """MySQL/MariaDB's TIMESTAMP ends in January 2038. A later run_at was refused by the
    server as "(1292) Truncated incorrect unixtime value", which names no field (and
    outside strict mode FROM_UNIXTIME is NULL: the job would be stored as due now)."""
    later = datetime(2040, 1, 1, tzinfo=UTC)
    last = datetime(2038, 1, 19, 3, 14, 7, tzinfo=UTC)
    ten_years = 10 * 365 * 86_400 + (last - datetime.now(UTC)).total_seconds()
    if util.backend_of(db_url) == "mysql":
        message = "run_at and delay must fall before 2038-01-19 03:14:08 UTC on mysql"
        for job in ({"run_at": later}, {"delay": ten_years}):
            with pytest.raises(UsageError, match=message):
                queue.enqueue("bad.echo", {}, queue=QUEUE, **job)
        with pytest.raises(UsageError, match=message):
            queue.enqueue_many([{"handler": "bad.echo", "queue": QUEUE, "run_at": later}])
        assert count_rows(db_url, "forkq_jobs") == 0
    else:  # SQLite keeps any time before the year 3000 (past it: a raw INSERT's milliseconds)
        job_id = queue.enqueue("bad.echo", {}, queue=QUEUE, run_at=later)
        row = queue.get(job_id)
        assert row is not None and row.run_at == later
        message = "run_at and delay must fall before 3000-01-01 00:00:00 UTC on sqlite"
        with pytest.raises(UsageError, match=message):
            queue.enqueue("bad.echo", {}, queue=QUEUE, run_at=datetime(3000, 1, 1, tzinfo=UTC))
    # The last second that fits is kept as it is, on either backend.
    job_id = queue.enqueue("bad.echo", {}, queue=QUEUE, run_at=last)
    row = queue.get(job_id)
    assert row is not None and row.run_at == last and row.status == JobState.SCHEDULED


def test_times_and_counts_no_column_holds_are_refused_on_every_backend(
    queue: Queue, db_url: str
) -> None:
    """Before 1970 (MySQL's TIMESTAMP: "(1292) Truncated incorrect unixtime value"), past
    the year 9999 (SQLite: an OverflowError from the driver) and a max_attempts past a
    32-bit INT ("(1264) Out of range value") were a database's error, not a UsageError;
    a key with a trailing space was another key's on MariaDB only."""
    refused = [
        ({"run_at": datetime(1, 1, 1, tzinfo=UTC)}, "run_at must fall after 1970-01-01"),
        ({"delay": 1e20}, "run_at and delay must fall before"),
        ({"max_attempts": 2**31}, "max_attempts must be an integer from 1 to 2147483647"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 2147483647"),
        # MariaDB's PAD SPACE collation: "u2 " found the job of "u2" and was skipped
        ({"unique_key": "u2 "}, "unique_key must not end with a space"),
        ({"limit_key": "k "}, "limit_key must not end with a space"),
        ({"group_key": "g "}, "group_key must not end with a space"),
    ]
    for options, message in refused:
        with pytest.raises(UsageError, match=message):
            queue.enqueue("bad.echo", {}, queue=QUEUE, **options)
        with pytest.raises(UsageError, match=message):
            queue.enqueue_many([{"handler": "bad.echo", "queue": QUEUE, **options}])
    assert count_rows(db_url, "forkq_jobs") == 0
    job_id = queue.enqueue("bad.echo", {}, queue=QUEUE, max_attempts=2**31 - 1)
    row = queue.get(job_id)
    assert row is not None and row.max_attempts == 2**31 - 1
