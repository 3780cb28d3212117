"""Same-host wake-up of `Queue.wait` (wake/waiters.py): a waiter's socket beside the
daemon's, found and woken by job id by the worker that ends the job; none without a
daemon directory, and nothing left behind."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.wake.places import ENV_RUNTIME_DIR, ENV_WAKE, database_key
from supervisor.wake.waiters import Waiter, wake_waiters, worker_wait_dir

IDENTITY = "sqlite:/srv/app/forkq.db"


@pytest.fixture
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="fqwait-"))  # short: socket paths fit in 108 bytes
    monkeypatch.setenv(ENV_RUNTIME_DIR, str(path))
    monkeypatch.delenv(ENV_WAKE, raising=False)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_worker_wakes_the_waiters_of_its_job_only(runtime_dir: Path) -> None:
    (runtime_dir / database_key(IDENTITY)).mkdir()  # what a daemon's listener makes
    directory = worker_wait_dir(IDENTITY)
    with Waiter(IDENTITY, 7) as first, Waiter(IDENTITY, 7) as second, Waiter(IDENTITY, 71) as other:
        assert first.listening and second.listening and other.listening
        assert wake_waiters(directory, 8) == 0
        assert wake_waiters(directory, 7) == 2  # not job 71's: names are `<id>.`
        assert first.nap(10) and second.nap(10)
        assert not other.nap(0.01)
        assert not first.nap(0.01)  # the wake-up was read
    assert list(Path(directory).iterdir()) == []  # closed: the sockets are gone


def test_without_a_daemon_directory_a_waiter_only_naps(runtime_dir: Path) -> None:
    with Waiter(IDENTITY, 7) as waiter:
        assert not waiter.listening
        assert not waiter.nap(0.01)
    assert wake_waiters(worker_wait_dir(IDENTITY), 7) == 0


def test_wake_off_binds_nothing(runtime_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (runtime_dir / database_key(IDENTITY)).mkdir()
    monkeypatch.setenv(ENV_WAKE, "0")
    with Waiter(IDENTITY, 7) as waiter:
        assert not waiter.listening
