"""`forkq schedule add|pause|resume|remove|list`: schedules added at runtime, beside the
file's; a name the file defines is refused with the reason (both backends)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from cli_util import failed, forkq, ok, workdir_fixture  # noqa: F401  (the `workdir` fixture)

from supervisor.store import Store


def test_a_schedule_is_added_paused_resumed_listed_and_removed(
    workdir: Path, db_url: str, store: Store
) -> None:
    add = ("schedule", "add", "hourly", "--cron", "0 * * * *", "--handler", "mail.send")
    extra = ("--queue", "mail", "--timezone", "Asia/Tokyo", "--payload", '{"to": "ops"}')
    assert ok(forkq(workdir, *add, *extra, database=db_url)) == "schedule hourly added\n"
    (row,) = store.runtime_schedules()
    assert (row.cron, row.handler, row.queue, row.timezone) == (
        "0 * * * *",
        "mail.send",
        "mail",
        "Asia/Tokyo",
    )
    assert dict(row.payload) == {"to": "ops"} and not row.paused
    assert row.changed_by and row.changed_by.endswith("(forkq schedule)")
    assert "already exists" in failed(forkq(workdir, *add, database=db_url), 2)

    assert "hourly paused" in ok(forkq(workdir, "schedule", "pause", "hourly", database=db_url))
    assert "already paused" in ok(forkq(workdir, "schedule", "pause", "hourly", database=db_url))
    (entry,) = json.loads(ok(forkq(workdir, "schedule", "list", "--json", database=db_url)))
    assert (entry["name"], entry["source"], entry["state"]) == ("hourly", "runtime", "paused")
    assert entry["next_run"] is None  # paused: it will not run at the cron's next slot
    since = store.runtime_schedules()[0].since
    assert "hourly resumed" in ok(forkq(workdir, "schedule", "resume", "hourly", database=db_url))
    (entry,) = json.loads(ok(forkq(workdir, "schedule", "list", "--json", database=db_url)))
    assert entry["state"] == "active" and entry["next_run"] is not None
    (resumed,) = store.runtime_schedules()
    assert not resumed.paused and resumed.since is not None and since is not None
    assert resumed.since >= since  # slots due while paused are never run

    assert "removed" in ok(forkq(workdir, "schedule", "remove", "hourly", database=db_url))
    assert store.runtime_schedules() == []
    line = failed(forkq(workdir, "schedule", "remove", "hourly", database=db_url), 2)
    assert "no schedule 'hourly' was added at runtime" in line


def test_a_bad_schedule_is_refused_with_the_reason(workdir: Path, db_url: str) -> None:
    base = ("schedule", "add", "x", "--handler", "mail.send")
    line = failed(forkq(workdir, *base, "--cron", "61 * * * *", database=db_url), 2)
    assert "not a valid cron expression" in line
    line = failed(
        forkq(workdir, *base, "--cron", "* * * * *", "--timezone", "Mars/Base", database=db_url), 2
    )
    assert "unknown time zone" in line
    line = failed(
        forkq(workdir, *base, "--cron", "* * * * *", "--payload", "[1]", database=db_url), 2
    )
    assert "payload" in line


def test_a_name_the_file_defines_is_the_files(workdir: Path, db_url: str, store: Store) -> None:
    (workdir / "forkq.toml").write_text(
        textwrap.dedent(
            """
            [supervisor]
            handlers = ["clihandlers"]
            [schedules.nightly]
            cron = "0 4 * * *"
            handler = "mail.send"
            """
        )
    )
    conf = ("-c", "forkq.toml")
    add = ("schedule", "add", "nightly", "--cron", "* * * * *", "--handler", "mail.send")
    for args in (add, ("schedule", "pause", "nightly"), ("schedule", "remove", "nightly")):
        line = failed(forkq(workdir, *args, *conf, database=db_url), 2)
        assert "is defined in forkq.toml ([schedules.nightly])" in line, line
        assert "edit the file" in line
    assert store.runtime_schedules() == []
    (entry,) = json.loads(ok(forkq(workdir, "schedules", "--json", *conf, database=db_url)))
    assert (entry["name"], entry["source"], entry["state"]) == ("nightly", "file", "active")
