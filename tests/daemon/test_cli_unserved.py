"""Work that can never run is said, not accepted silently (issue 21.15): `forkq enqueue`
warns about a handler nothing registers or a queue no pool serves (and still enqueues),
`forkq pause` about a queue no pool serves (and still pauses), `forkq check` refuses a
schedule whose handler nothing registers, `forkq run` logs a registered handler whose
queue no pool works, and `forkq status` names such queues."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from cli_util import forkq, ok, workdir_fixture  # noqa: F401  (the `workdir` fixture)
from daemon_util import Daemon

from supervisor import Queue, events
from supervisor.daemon import unserved
from supervisor.store import Store

# clihandlers registers mail.send on queue "mail"; these pools do not serve it.
POOLS = "\n[pools.default]\nworkers = 1\n"
MAIL_POOL = "\n[pools.mail]\nworkers = 1\n"


def config(workdir: Path, extra: str) -> None:
    (workdir / "forkq.toml").write_text('[supervisor]\nhandlers = ["clihandlers"]\n' + extra)


def test_enqueue_warns_about_work_nothing_would_run_and_still_enqueues(
    workdir: Path, db_url: str, store: Store
) -> None:
    config(workdir, POOLS)
    result = forkq(workdir, "enqueue", "mail.send", "-c", "forkq.toml", database=db_url)
    job = store.get_job(int(ok(result)))
    assert job is not None and job.queue == "mail"  # enqueued all the same
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("forkq: warning: no pool of forkq.toml serves queue 'mail'"), line

    result = forkq(workdir, "enqueue", "mail.sned", "-c", "forkq.toml", database=db_url)
    assert store.get_job(int(ok(result))) is not None
    [line] = result.stderr.strip().splitlines()  # its queue, "default", has a pool
    assert line.startswith("forkq: warning: no handler module or [commands] table of")
    assert "'mail.sned'" in line

    config(workdir, MAIL_POOL)
    result = forkq(workdir, "enqueue", "mail.send", "-c", "forkq.toml", database=db_url)
    ok(result)
    assert result.stderr == ""


def test_schedule_add_warns_about_jobs_nothing_would_run_and_still_adds_it(
    workdir: Path, db_url: str, store: Store
) -> None:
    """Before: a schedule of a mistyped handler was added without a word, then made a
    dead job every minute."""
    config(workdir, POOLS)
    every = ["--cron", "* * * * *", "-c", "forkq.toml"]
    result = forkq(workdir, "schedule", "add", "typo", "--handler", "mail.sned", *every,
                   database=db_url)  # fmt: skip
    assert ok(result) == "schedule typo added\n"
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("forkq: warning: no handler module or [commands] table of"), line
    assert "'mail.sned'" in line and "ends each of its jobs dead" in line
    result = forkq(workdir, "schedule", "add", "mail", "--handler", "mail.send", *every,
                   database=db_url)  # fmt: skip
    [line] = result.stderr.strip().splitlines()  # clihandlers sends mail.send to "mail"
    assert line.startswith("forkq: warning: no pool of forkq.toml serves queue 'mail'"), line
    assert {s.name for s in store.runtime_schedules()} == {"typo", "mail"}  # added anyway
    checked = forkq(workdir, "check", "-c", "forkq.toml", database=db_url)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    [fail] = [line for line in checked.stdout.splitlines() if line.startswith("FAIL")]
    assert fail.split()[1] == "schedules" and "runtime schedule typo" in fail, fail


def test_pause_warns_about_a_queue_no_pool_serves_and_still_pauses(
    workdir: Path, db_url: str, store: Store
) -> None:
    """Before: `forkq pause nosuch` paused a queue nothing serves without a word."""
    config(workdir, POOLS)
    result = forkq(workdir, "pause", "nosuch", "-c", "forkq.toml", database=db_url)
    assert ok(result) == "queue nosuch paused\n"
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("forkq: warning: no pool of forkq.toml serves queue 'nosuch'"), line
    assert store.paused_queues() == {"nosuch"}  # paused all the same: ahead of time is fine

    for args in (["pause", "default"], ["resume", "nosuch"]):
        result = forkq(workdir, *args, "-c", "forkq.toml", database=db_url)
        ok(result)
        assert result.stderr == "", args
    assert store.paused_queues() == {"default"}


def test_check_refuses_a_schedule_whose_handler_nothing_registers(
    workdir: Path, db_url: str
) -> None:
    schedule = '\n[schedules.nightly]\ncron = "0 4 * * *"\nhandler = "reports.nightly"\n'
    config(workdir, MAIL_POOL + schedule)
    result = forkq(workdir, "check", "-c", "forkq.toml", database=db_url)
    assert result.returncode == 78, (result.stdout, result.stderr)
    [line] = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert line.split()[:2] == ["FAIL", "schedules"] and "'reports.nightly'" in line

    config(workdir, MAIL_POOL + schedule.replace("reports.nightly", "mail.send"))
    result = forkq(workdir, "check", "-c", "forkq.toml", database=db_url)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert any(line.split()[:2] == ["ok", "schedules"] for line in result.stdout.splitlines())


def test_status_names_the_queues_no_pool_serves(workdir: Path, db_url: str) -> None:
    config(workdir, POOLS)
    ok(forkq(workdir, "enqueue", "mail.send", "-c", "forkq.toml", database=db_url))
    text = ok(forkq(workdir, "status", "-c", "forkq.toml", database=db_url))
    assert "no pool of forkq.toml serves: mail" in text
    config(workdir, MAIL_POOL)
    text = ok(forkq(workdir, "status", "-c", "forkq.toml", database=db_url))
    assert "serves" not in text


def test_boot_logs_a_registered_handler_whose_queue_no_pool_works(
    tmp_path: Path, db_url: str
) -> None:
    # The test handlers register on queue "default"; this daemon's only pool is "work".
    daemon = Daemon(tmp_path / "d", db_url, pools={"work": {"workers": 1}})
    try:
        daemon.start().wait_ready()
        unserved = daemon.events(events.HANDLER_QUEUE_UNSERVED)
        assert {(e["handler"], e["queue"]) for e in unserved} >= {("t.noop", "default")}
        assert daemon.stop() == 0, daemon.describe()
    finally:
        daemon.kill_all()


def test_boot_logs_a_schedule_whose_handler_nothing_registers(
    tmp_path: Path, sqlite_db_url: str
) -> None:
    """`forkq check` refuses it; `run` starts (another host may register it) and says it."""
    daemon = Daemon(tmp_path / "d", sqlite_db_url, pools={"work": {"workers": 1}})
    schedule = '\n[schedules.nightly]\ncron = "0 3 * * *"\nhandler = "reports.nope"\n'
    daemon.write_config(text=daemon.config_path.read_text() + schedule)
    try:
        daemon.start().wait_ready()
        [said] = daemon.events(events.SCHEDULE_HANDLER_UNKNOWN)
        assert (said["schedule"], said["handler"]) == ("nightly", "reports.nope")
        assert daemon.stop() == 0, daemon.describe()
    finally:
        daemon.kill_all()


def test_a_reload_says_what_its_new_config_could_never_run_as_a_boot_does(
    tmp_path: Path, sqlite_db_url: str
) -> None:
    """HUP with a schedule whose handler nothing registers: said then, not only at boot."""
    daemon = Daemon(tmp_path / "d", sqlite_db_url, pools={"work": {"workers": 1}})
    try:
        daemon.start().wait_ready()
        assert daemon.events(events.SCHEDULE_HANDLER_UNKNOWN) == []
        schedule = '\n[schedules.nightly]\ncron = "0 3 * * *"\nhandler = "reports.nope"\n'
        daemon.write_config(text=daemon.config_path.read_text() + schedule)
        daemon.send_signal(signal.SIGHUP)
        daemon.wait_event(events.CONFIG_RELOADED)
        [said] = daemon.events(events.SCHEDULE_HANDLER_UNKNOWN)
        assert (said["schedule"], said["handler"]) == ("nightly", "reports.nope")
        assert daemon.stop() == 0, daemon.describe()
    finally:
        daemon.kill_all()


def test_the_master_logs_once_a_queue_whose_ready_jobs_no_pool_serves(
    tmp_path: Path, db_url: str
) -> None:
    """On the check tick (the first comes one check_interval after boot), each queue with
    ready jobs and no pool of this config is logged once (queue_unserved), again only
    after it stopped being so. Before: the daemon said nothing; only `forkq status -c` did."""
    queue = Queue(db_url)
    daemon = Daemon(tmp_path / "d", db_url, pools={"work": {"workers": 1}})

    def said(name: str, count: int) -> list[dict[str, Any]]:
        return daemon.wait_event(
            events.QUEUE_UNSERVED, timeout=20, where=lambda e: e["queue"] == name, count=count
        )

    try:
        orphans = [queue.enqueue("t.noop", queue="orphan") for _ in range(2)]
        queue.enqueue("t.noop", queue="work")  # served: never named
        daemon.start().wait_ready()
        [boot] = said("orphan", 1)
        assert (boot["ready"], boot["note"]) == (2, unserved.NOTE), boot
        assert "this config" in boot["note"]
        queue.enqueue("t.noop", queue="later")  # seen by a tick, which sees orphan again
        [tick] = said("later", 1)
        assert tick["ready"] == 1
        for job_id in orphans:  # orphan has nothing ready: forgotten on the next tick
            assert queue.cancel(job_id)
        queue.enqueue("t.noop", queue="third")
        said("third", 1)
        assert len(daemon.events(events.QUEUE_UNSERVED, queue="orphan")) == 1  # not per tick
        queue.enqueue("t.noop", queue="orphan")  # unserved again: said again
        again = said("orphan", 2)[-1]
        assert again["ready"] == 1
        assert not daemon.events(events.QUEUE_UNSERVED, queue="work")
        assert daemon.stop() == 0, daemon.describe()
    finally:
        queue.close()
        daemon.kill_all()
