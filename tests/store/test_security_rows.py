"""Security properties users rely on: a row is data, never code.

- A handler name that is an importable path (`os.system`, `subprocess.run`,
  `builtins.eval`, `supervisor.cli.parser.main`, a module of our own with an import side
  effect) is never imported or called; the job ends dead, "unknown handler".
- Payloads are JSON only: a pickle is never unpickled; it ends dead as non-JSON.

Jobs are worked in-process with `Worker.work_once()`, on both backends. Secrets:
tests/daemon/test_security.py; SQL built by string formatting: tests/unit/test_security_sql.py.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import util
from util import backend_of

from supervisor import registry
from supervisor.config import Config, PoolConfig
from supervisor.dburl import parse_database_url
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


QUEUE = "sec"


def insert_raw(db_url: str, handler: str, payload: Any, queue: str = QUEUE) -> int:
    return util.insert_raw(db_url, handler, payload, queue)


CANARY_MODULE = "fq_canary_mod"
received: list[Any] = []
registry.handler("sec.echo", queue=QUEUE)(lambda payload, job: received.append(payload))


def canary_source(directory: Path) -> str:
    return (
        "import pathlib\n"
        f"pathlib.Path({str(directory)!r}, 'imported').touch()\n"
        "def touch(payload, job):\n"
        f"    pathlib.Path({str(directory)!r}, 'called').touch()\n"
    )


def code_rows(canaries: Path) -> list[tuple[str, str]]:
    """(handler, payload) rows naming callables; each payload is what would leave a canary
    file behind if the named callable were ever called with it."""
    touch = str(canaries / "touched")
    return [
        ("os.system", json.dumps(f"touch {touch}")),
        ("subprocess.run", json.dumps(["touch", touch])),
        ("subprocess.check_call", json.dumps(["touch", touch])),
        ("builtins.eval", json.dumps(f"open({touch!r}, 'w')")),
        ("builtins.exec", json.dumps(f"open({touch!r}, 'w')")),
        ("posix.system", json.dumps(f"touch {touch}")),
        ("supervisor.cli.parser.main", json.dumps(["purge", "--dead"])),
        ("importlib.import_module", json.dumps(CANARY_MODULE)),
        (f"{CANARY_MODULE}.touch", "{}"),
        (CANARY_MODULE, "{}"),
        ("__import__", json.dumps(CANARY_MODULE)),
        ("os:system", json.dumps(f"touch {touch}")),
    ]


class PickleBomb:
    """Unpickling this runs `touch <path>`: what a pickle-reading queue would execute."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


@pytest.fixture
def canaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory holding the canary module (importable) and, if anything ran, canaries."""
    directory = tmp_path / "canaries"
    directory.mkdir()
    (directory / f"{CANARY_MODULE}.py").write_text(canary_source(directory))
    monkeypatch.syspath_prepend(str(directory))
    return directory


@pytest.fixture
def work(store: Store, db_url: str) -> Callable[[], int]:
    def run() -> int:
        config = Config(database=parse_database_url(db_url), pools=(PoolConfig(name=QUEUE),))
        worker = Worker(store, config, [QUEUE], "test:1:security")
        ran = 0
        while done := worker.work_once():
            ran += done
        return ran

    return run


# --- rows are data, never code ----------------------------------------------------------------


def test_a_row_naming_any_importable_callable_is_never_imported_or_called(
    db_url: str, store: Store, work: Callable[[], int], canaries: Path
) -> None:
    assert CANARY_MODULE not in sys.modules
    modules_before = set(sys.modules)
    ids = [insert_raw(db_url, handler, payload) for handler, payload in code_rows(canaries)]
    assert work() == len(ids)
    for job_id in ids:
        row = store.get_job(job_id)
        assert row is not None and row.status == JobState.DEAD, row
        assert row.last_error and row.last_error.startswith("unknown handler"), row.last_error
    assert set(sys.modules) - modules_before == set(), "a row made the worker import a module"
    assert sorted(p.name for p in canaries.iterdir()) == [f"{CANARY_MODULE}.py"]


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_a_pickled_payload_is_never_unpickled(
    db_url: str, store: Store, work: Callable[[], int], tmp_path: Path, protocol: int
) -> None:
    target = tmp_path / "unpickled"
    blob = pickle.dumps(PickleBomb(target), protocol=protocol)
    if protocol == 0:
        payload: Any = blob.decode("latin-1")  # text: fits any TEXT column
    elif backend_of(db_url) == "sqlite":
        payload = blob  # SQLite keeps the bytes as they are (a BLOB)
    else:
        pytest.skip("a binary pickle is not valid utf8mb4 text: MariaDB refuses the row")
    received.clear()
    job_id = insert_raw(db_url, "sec.echo", payload)
    assert work() == 1
    assert received == []
    row = store.get_job(job_id)
    assert row is not None and row.status == JobState.DEAD
    # A BLOB is read as the text it holds (a driver's bytes): a binary pickle is no UTF-8.
    reasons = ("payload is not valid JSON", "the row cannot be read: payload is not valid UTF-8")
    assert row.last_error and row.last_error.startswith(reasons), row.last_error
    assert not target.exists(), "the pickle was loaded"
