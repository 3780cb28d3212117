"""SQLite's write lock, as the store waits for it (store/sqlite.py `_begin_immediate`): a
claim behind another connection's write transaction waits and then claims; one behind a
lock held past `busy_timeout` fails as a transient error (the worker backs off), never as
a hard one. And log lines carry UTC timestamps as datetime.isoformat writes them."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from supervisor import logs
from supervisor.errors import TransientDatabaseError
from supervisor.queue import Queue
from supervisor.store import open_store


def test_a_claim_waits_for_a_held_write_lock_then_claims(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    store = open_store(url, timeout=10.0)
    store.apply_schema()
    Queue(url).enqueue("t.noop", {}, queue="q")
    blocker = sqlite3.connect(tmp_path / "q.db", isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, blocker.execute, ["COMMIT"]).start()
    started = time.monotonic()
    claimed = store.claim("q", "me", 5, 60.0)
    assert [row.handler for row in claimed] == ["t.noop"]
    assert time.monotonic() - started >= 0.25  # it waited for the lock, and got it
    blocker.close()
    store.close()


def test_a_write_lock_held_past_busy_timeout_is_a_transient_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'q.db'}"
    open_store(url).apply_schema()
    store = open_store(url, timeout=0.2)
    blocker = sqlite3.connect(tmp_path / "q.db", isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    with pytest.raises(TransientDatabaseError):
        store.claim("q", "me", 5, 60.0)
    blocker.execute("COMMIT")
    assert store.claim("q", "me", 5, 60.0) == []  # and the next try goes through
    blocker.close()
    store.close()


def test_log_timestamps_are_utc_iso_with_microseconds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.setup("info", json_lines=True)
    for _ in range(3):
        before = time.time()
        logs.get().info("probe", n=1)
        after = time.time()
        line = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", line["timestamp"])
        parsed = datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00"))
        assert parsed.tzinfo == UTC
        assert before - 1e-6 <= parsed.timestamp() <= after + 1e-6
        time.sleep(0.4)  # the next line may fall in another second
