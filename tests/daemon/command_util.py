"""Command handlers in the real daemon: `[commands."NAME"]` tables, jobs and processes.

Shared by test_command_handlers.py and test_command_kills.py: a daemon (daemon_util's)
whose config has command tables, jobs waited for in the store, and the processes a
command noted (each appends its pid to a file, so the test can look for it afterwards).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import psutil
from daemon_util import Daemon, render_config, toml_value
from util import wait_until

from supervisor.models import JobRow
from supervisor.store import Store

QUEUE = "work"
POOL = {"workers": 1, "max_workers": 1, "timeout": 30, "on_success": "keep"}


def commands_toml(commands: dict[str, dict[str, Any]]) -> str:
    """`[commands."NAME"]` tables; a dict value (env) as an inline table."""
    lines: list[str] = []
    for name, table in commands.items():
        lines += ["", f"[commands.{json.dumps(name)}]"]
        for key, value in table.items():
            if isinstance(value, dict):
                pairs = ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {pairs} }}")
            else:
                lines.append(f"{key} = {toml_value(value)}")
    return "\n".join(lines) + "\n"


def command_daemon(
    daemons: Callable[..., Daemon],
    commands: dict[str, dict[str, Any]],
    env: dict[str, str] | None = None,
    pool: dict[str, Any] | None = None,
) -> Daemon:
    """A configured, not yet started daemon with one pool (QUEUE) and these commands."""
    made = daemons(pools={QUEUE: {**POOL, **(pool or {})}}, env=env)
    text = render_config(made.db_url, made.pools, made.supervisor) + commands_toml(commands)
    made.write_config(text=text)
    return made


def script(directory: Path, name: str, body: str) -> str:
    """An executable shell script in `directory`; its path, for argv."""
    path = directory / name
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)
    return str(path)


def wait_job(
    store: Store,
    job_id: int,
    done: Callable[[JobRow], bool],
    daemon: Daemon,
    timeout: float = 30.0,
) -> JobRow:
    """The job once `done(row)` holds; the daemon's log tail in the failure message."""

    def look() -> JobRow | None:
        row = store.get_job(job_id)
        return row if row is not None and done(row) else None

    try:
        return wait_until(look, timeout=timeout, interval=0.05, message=f"job {job_id}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; row: {store.get_job(job_id)}\n{daemon.describe()}") from None


def status_is(*statuses: str) -> Callable[[JobRow], bool]:
    return lambda row: str(row.status) in statuses


def noted_pids(path: Path, count: int, timeout: float = 15.0) -> list[int]:
    """The pids a command appended to `path`, once there are `count` of them."""

    def look() -> list[int] | None:
        try:
            pids = [int(word) for word in path.read_text().split()]
        except (FileNotFoundError, ValueError):
            return None
        return pids if len(pids) >= count else None

    return wait_until(look, timeout=timeout, interval=0.02, message=f"{count} pids in {path}")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_all_gone(pids: Iterable[int], timeout: float = 15.0) -> None:
    pids = list(pids)
    wait_until(
        lambda: not any(alive(pid) for pid in pids),
        timeout=timeout,
        interval=0.02,
        message=f"processes {[p for p in pids if alive(p)]} gone",
    )


def kill_noted(path: Path) -> None:
    """Teardown: a failed test must not leave a noted process running."""
    try:
        pids = [int(word) for word in path.read_text().split()]
    except (FileNotFoundError, ValueError):
        return
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.name() in ("sh", "dash", "sleep", "php"):  # not a pid reused since
                proc.kill()
        except psutil.Error:
            continue
