"""`forkq jobs` and `forkq show` say how many attempts a job gets when its row leaves
max_attempts NULL (a raw INSERT: its handler's default applies), and it is the number the
daemon then gives it (both backends).

With the daemon's config (-c) the CLI loads its handlers and shows what the worker
decides (fate.max_attempts_for: the row's, else its handler's, else forkq's): `0/3` in
the table, `- (default: 3)` in `show`, and `max_attempts_effective` beside the unchanged
`max_attempts` (null) in the JSON of both. Without a config it cannot know: `0/default`
and null (before: `0/-`, which read as "no limit"). A config whose handler modules do
not import here is a warning, and the listing goes on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_util import forkq, ok
from command_util import POOL, QUEUE, commands_toml, status_is, wait_job
from daemon_util import Daemon, daemons_fixture, render_config  # noqa: F401  (the `daemons` fixture)
from util import insert_raw, sql

from supervisor.store import open_store

pytestmark = pytest.mark.timeout(120)

MODULE = """
from supervisor import handler

@handler("p.twice", queue="work", max_attempts=2, backoff_base=0.05)
def twice(payload, job):
    raise RuntimeError("never works")
"""
FAILING = {"argv": ["sh", "-c", "echo broken >&2; exit 1"], "queue": QUEUE}


def configured(daemons: Callable[..., Daemon]) -> Daemon:
    """A daemon (not started) whose config has p.twice (2 attempts, a module) and
    c.thrice (3 attempts, a [commands] table)."""
    daemon = daemons(pools={QUEUE: dict(POOL)})
    daemon.write_module("limitshandlers", MODULE)
    supervisor = {
        **daemon.supervisor,
        "handlers": [*daemon.supervisor["handlers"], "limitshandlers"],
    }
    commands = {"c.thrice": {**FAILING, "max_attempts": 3, "backoff_base": 0.05}}
    text = render_config(daemon.db_url, daemon.pools, supervisor) + commands_toml(commands)
    daemon.write_config(text=text)
    return daemon


def attempts_column(text: str) -> dict[int, str]:
    """`forkq jobs`: {id: its ATTEMPTS cell}."""
    header, *lines = text.splitlines()
    column = header.split().index("ATTEMPTS")
    return {int(line.split()[0]): line.split()[column] for line in lines}


def shown(text: str, key: str) -> str:
    """`forkq show`: the value of one field."""
    [line] = [line for line in text.splitlines() if line.split(None, 1)[:1] == [key]]
    return line.split(None, 1)[1]


def test_jobs_and_show_give_the_attempts_the_daemon_gives_a_null_max_attempts(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    daemon = configured(daemons)
    twice = insert_raw(db_url, "p.twice", "{}", QUEUE)
    thrice = insert_raw(db_url, "c.thrice", "{}", QUEUE)
    workdir, config = daemon.directory, str(daemon.config_path)

    def cli(*args: str) -> str:
        return ok(forkq(workdir, *args, "-c", config, database=db_url))

    assert attempts_column(cli("jobs")) == {twice: "0/2", thrice: "0/3"}
    listed = {job["id"]: job for job in json.loads(cli("jobs", "--json"))}
    limits = [
        (listed[i]["max_attempts"], listed[i]["max_attempts_effective"]) for i in (twice, thrice)
    ]
    assert limits == [(None, 2), (None, 3)]
    assert shown(cli("show", str(thrice)), "max_attempts") == "- (default: 3)"
    document = json.loads(cli("show", str(thrice), "--json"))
    assert (document["max_attempts"], document["max_attempts_effective"]) == (None, 3)

    daemon.start().wait_ready()  # the daemon gives each exactly that many attempts
    store = open_store(db_url)
    try:
        for job_id, count in ((twice, 2), (thrice, 3)):
            dead = wait_job(store, job_id, status_is("dead"), daemon)
            assert dead.attempts == count, dead
            assert f"(attempt {count} of {count})" in str(dead.last_error), dead
    finally:
        store.close()
    assert attempts_column(cli("jobs")) == {twice: "2/2", thrice: "3/3"}


def test_without_the_daemons_config_a_null_max_attempts_is_its_default(
    daemons: Callable[..., Daemon], db_url: str, tmp_path: Path
) -> None:
    daemon = configured(daemons)
    job = insert_raw(db_url, "c.thrice", "{}", QUEUE)
    given = insert_raw(db_url, "c.thrice", "{}", QUEUE)  # a producer that says how many
    sql(db_url, "UPDATE forkq_jobs SET max_attempts = 7 WHERE id = ?", (given,))

    bare = ok(forkq(tmp_path, "jobs", database=db_url))  # no -c, no FORKQ_CONFIG
    assert attempts_column(bare) == {job: "0/default", given: "0/7"}
    listed = {
        j["id"]: j for j in json.loads(ok(forkq(tmp_path, "jobs", "--json", database=db_url)))
    }
    assert [
        (listed[i]["max_attempts"], listed[i]["max_attempts_effective"]) for i in (job, given)
    ] == [(None, None), (7, 7)]
    text = ok(forkq(tmp_path, "show", str(job), database=db_url))
    assert shown(text, "max_attempts").startswith("- (its handler's default")

    # The daemon's config, whose handler module does not import from here: a warning.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = forkq(elsewhere, "jobs", "-c", str(daemon.config_path), database=db_url)
    assert run.returncode == 0, run.stderr
    assert attempts_column(run.stdout) == {job: "0/default", given: "0/7"}
    assert "forkq: warning:" in run.stderr and "failed to import" in run.stderr, run.stderr
    assert "a NULL max_attempts shows as default" in run.stderr
