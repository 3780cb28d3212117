"""Which rows a master may judge by pid, and what `forkq status` shows of silent processes.

A hostname does not say which machine a pid lives on: two servers, VMs or containers
may share one. Every process row names its node (`proc.node_id()`: the kernel's boot id
and the pid namespace), and a master's boot-time settle touches only rows of its own
node whose pid is gone; rows of another node (or written without one) are left to the
stale-heartbeat path. `forkq status` lists every row with its heartbeat age and marks
the ones silent for `process_stale_after` as stale, with since when, until they are
pruned.

The second "server" with our hostname is a daemon started in a pid namespace and /proc
of its own (`unshare --pid --mount-proc`), as a container on this machine runs it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from daemon_util import Daemon, daemons_fixture  # noqa: F401  (the `daemons` fixture)
from util import backdate, dies_with_us, in_ci, subprocess_env, wait_until

from supervisor import events
from supervisor.models import JobState
from supervisor.proc import hostname, node_id
from supervisor.queue import Queue
from supervisor.store import Store

QUEUE = "work"
OTHER_NODE = "0b5e55ed-0000-4000-8000-000000000000:4026531836"  # another machine, same name


def namespaces_unavailable() -> str | None:
    """Why this machine cannot start a process in a pid namespace of its own, or None."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux and unshare(1)"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        return f"cannot create a pid namespace here: {probe.stderr.strip()[:200]}"
    return None


def need_namespaces() -> None:
    reason = namespaces_unavailable()
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"{reason} (CI is set: the identity tests must run)", pytrace=False)
    pytest.skip(reason)


def in_new_pid_namespace(code: str) -> str:
    """What `python -c code` prints when run in a pid namespace and /proc of its own."""
    result = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
        env=subprocess_env("sqlite:///unused.db"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.strip()


def dead_pid() -> int:
    """A pid whose process has exited and been reaped."""
    proc = subprocess.Popen(["true"])
    proc.wait(timeout=30)
    return proc.pid


def claim_one(queue: Queue, owner: str) -> int:
    """Enqueue a job and claim it for `owner` under a long lease; its id."""
    job_id = queue.enqueue("t.noop", {}, queue=QUEUE)
    [job] = queue.store.claim(QUEUE, owner, 1, lease=600)
    assert job.id == job_id
    return job_id


# --- the node ------------------------------------------------------------------------------


NODE_OF_A_NEW_PROCESS = "from supervisor.proc import node_id; print(node_id())"


def test_every_process_of_one_pid_namespace_has_one_node_and_another_namespace_another() -> None:
    need_namespaces()
    ours = node_id()
    assert 0 < len(ours) <= 64  # forkq_processes.node is VARCHAR(64)
    same = subprocess.run(
        [sys.executable, "-c", NODE_OF_A_NEW_PROCESS],
        env=subprocess_env("sqlite:///unused.db"),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert same == ours
    container = in_new_pid_namespace(NODE_OF_A_NEW_PROCESS)
    assert container != ours
    # Same kernel boot: only the pid namespace part differs.
    assert container.rsplit(":", 1)[0] == ours.rsplit(":", 1)[0]


# --- the boot-time settle ------------------------------------------------------------------


def test_a_booting_master_settles_dead_rows_of_its_own_node_only(
    daemons: Callable[..., Daemon],
    store: Store,
    queue: Queue,
) -> None:
    """Three rows with our hostname and a pid that is gone: ours (our node) is settled at
    boot; another node's and a row written without a node (older code) are left alone."""
    pid, host = dead_pid(), hostname()
    ours, theirs, legacy = (f"{host}:{pid}:{tag}" for tag in ("0000aaaa", "0000bbbb", "0000cccc"))
    store.register_process(ours, host, pid, "worker", pool=QUEUE, node=node_id())
    store.register_process(theirs, host, pid, "worker", pool=QUEUE, node=OTHER_NODE)
    store.register_process(legacy, host, pid, "worker", pool=QUEUE)
    held = {owner: claim_one(queue, owner) for owner in (ours, theirs, legacy)}

    daemon = daemons(pools={QUEUE: {"workers": 1}}, supervisor={"process_stale_after": 60})
    daemon.start()
    # The boot-time settle runs before master_started is logged.
    daemon.wait_event(events.MASTER_STARTED, timeout=30)
    [settled] = daemon.events(events.STALE_PROCESSES_SETTLED)
    assert settled["count"] == 1

    rows = {p.name: p for p in store.list_processes()}
    assert ours not in rows
    assert rows[theirs].node == OTHER_NODE and rows[legacy].node is None
    ours_job = store.get_job(held[ours])
    assert ours_job is not None and ours_job.locked_by != ours  # settled: attempt counted
    for owner in (theirs, legacy):
        job = store.get_job(held[owner])
        assert job is not None
        assert (job.status, job.locked_by, job.attempts) == (JobState.RUNNING, owner, 1)


class NamespacedDaemon(Daemon):
    """The daemon as a container on this machine runs it: our hostname, but a pid
    namespace and a /proc of its own (it cannot see our pids, we see its).

    unshare blocks SIGTERM and SIGINT while it waits for its child: it gets SIGKILL when
    pytest dies, and `--kill-child` SIGKILLs the master, the namespace's init, which
    takes every process of the namespace with it."""

    parent_death_signal = signal.SIGKILL

    def start(self) -> Daemon:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        command = [sys.executable, "-m", "supervisor", "run", "-c", str(self.config_path)]
        with open(self.log_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *command],
                cwd=self.directory,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                preexec_fn=dies_with_us(self.parent_death_signal),
            )
        self.sid = self.proc.pid
        return self


def test_a_second_server_with_our_hostname_leaves_our_running_job_alone_at_its_boot(
    tmp_path: Path,
    db_url: str,
    daemons: Callable[..., Daemon],
    store: Store,
    queue: Queue,
) -> None:
    """Before nodes, the second master saw rows of its hostname whose pids it could not
    see, called them dead and failed the job the first server was still running."""
    need_namespaces()
    pools = {QUEUE: {"workers": 1, "timeout": 120}}
    first = daemons(pools=pools, name="first")
    first.start().wait_ready()
    job_id = queue.enqueue("t.sleep", {"seconds": 60}, queue=QUEUE)

    def running_holder() -> str | None:
        job = store.get_job(job_id)
        return job.locked_by if job is not None and job.status == JobState.RUNNING else None

    holder = wait_until(running_holder, timeout=20, message="the job running on the first server")
    first_rows = {p.name: p for p in store.list_processes()}
    holder_pid = first_rows[holder].pid
    # What made the old rule settle it: the second server cannot see the first one's pids.
    probe = f"import psutil; print(psutil.pid_exists({holder_pid}))"
    assert in_new_pid_namespace(probe) == "False"

    second = NamespacedDaemon(tmp_path / "second", db_url, pools=pools, name="second")
    try:
        second.start()
        second.wait_event(events.MASTER_STARTED, timeout=30)
        job = store.get_job(job_id)
        assert job is not None
        assert (job.status, job.locked_by, job.attempts) == (JobState.RUNNING, holder, 1)
        rows = {p.name: p for p in store.list_processes()}
        assert set(first_rows) <= set(rows)
        [first_master] = [p for p in first_rows.values() if p.role == "master"]
        [second_master] = [
            p for n, p in rows.items() if p.role == "master" and n != first_master.name
        ]
        assert second_master.host == first_master.host  # one hostname, two nodes
        assert second_master.node != first_master.node == node_id()
        assert second.events(events.STALE_PROCESSES_SETTLED) == []
    finally:
        second.kill_all()


# --- forkq status --------------------------------------------------------------------------


def forkq_status(url: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "supervisor", "status", *args, "--database", url],
        env={**subprocess_env(url), "FORKQ_CONFIG": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout


def process_line(text: str, host: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(f"{host} "))


def test_status_lists_a_silent_host_marked_stale_since_it_went_quiet(
    db_url: str, store: Store
) -> None:
    store.register_process("app1:100:aaaa", "app1", 100, "master", node=OTHER_NODE)
    store.register_process("app2:200:bbbb", "app2", 200, "master", node=OTHER_NODE)
    store.register_process("app2:201:cccc", "app2", 201, "worker", pool="mail", node=OTHER_NODE)
    for name in ("app2:200:bbbb", "app2:201:cccc"):  # app2 cut off for two minutes
        backdate(db_url, "forkq_processes", "heartbeat_at", "name", name, 120)

    document = json.loads(forkq_status(db_url, "--json"))
    views = {p["name"]: p for p in document["processes"]}
    assert set(views) == {"app1:100:aaaa", "app2:200:bbbb", "app2:201:cccc"}
    live = views["app1:100:aaaa"]
    assert (live["stale"], live["stale_since"]) == (False, None)
    assert live["node"] == OTHER_NODE
    for name in ("app2:200:bbbb", "app2:201:cccc"):
        view = views[name]
        assert view["stale"] is True and view["heartbeat_age"] >= 120
        # Stale since its last heartbeat plus process_stale_after (60 s by default).
        since = datetime.fromisoformat(view["stale_since"])
        beat = datetime.fromisoformat(view["heartbeat_at"])
        assert since - beat == timedelta(seconds=60)

    text = forkq_status(db_url)
    header = next(line for line in text.splitlines() if line.startswith("HOST "))
    assert header.split() == ["HOST", "PID", "ROLE", "POOL", "STATE", "HEARTBEAT"]
    assert process_line(text, "app1").split()[4] == "live"
    since = datetime.fromisoformat(views["app2:200:bbbb"]["stale_since"])
    marker = f"stale since {since:%Y-%m-%d %H:%M:%S}Z"
    app2 = [line for line in text.splitlines() if line.startswith("app2 ")]
    assert len(app2) == 2 and all(marker in line for line in app2), app2
    assert "2 processes stale: no heartbeat for 1m or more" in text


def test_status_judges_stale_by_the_configured_process_stale_after(
    tmp_path: Path, db_url: str, store: Store
) -> None:
    store.register_process("app2:200:bbbb", "app2", 200, "master", node=OTHER_NODE)
    backdate(db_url, "forkq_processes", "heartbeat_at", "name", "app2:200:bbbb", 120)
    config = tmp_path / "forkq.toml"
    for stale_after, expected in ((300, "live"), (90, "stale")):
        config.write_text(f"[supervisor]\nprocess_stale_after = {stale_after}\n")
        text = forkq_status(db_url, "-c", str(config))
        assert process_line(text, "app2").split()[4] == expected, text
        document: dict[str, Any] = json.loads(forkq_status(db_url, "-c", str(config), "--json"))
        [view] = document["processes"]
        assert view["stale"] is (expected == "stale")
