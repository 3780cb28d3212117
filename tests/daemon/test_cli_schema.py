"""`forkq schema` and `forkq check` as users run them (a real subprocess); the database
password never in any command's output; and what no subprocess can be made to do on
purpose (an unexpected exception, Ctrl-C), in-process. The rest of `forkq`: test_cli.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_util import (
    HANDLER_MODULE,
    failed,
    forkq,
    ok,
    workdir_fixture,  # noqa: F401  (the `workdir` fixture)
)
from util import SCHEMA_SQL, SQLITE_SCHEMA_SQL, database_name, free_tcp_port, mysql_connect, sql

from supervisor import Queue
from supervisor.cli import common
from supervisor.cli import parser as cli
from supervisor.dburl import parse_database_url
from supervisor.store import SCHEMA_VERSION, Store, open_store

# --- schema and check ------------------------------------------------------------------------


def test_schema_print_is_the_backends_ddl(workdir: Path, db_url: str) -> None:
    out = ok(forkq(workdir, "schema", "print", database=db_url))
    assert "CREATE TABLE IF NOT EXISTS forkq_jobs" in out
    expected = SCHEMA_SQL if parse_database_url(db_url).backend == "mysql" else SQLITE_SCHEMA_SQL
    assert out == expected.read_text(encoding="utf-8")


def test_schema_apply_is_idempotent_and_keeps_jobs(
    workdir: Path, db_url: str, store: Store, queue: Queue
) -> None:
    job_id = queue.enqueue("mail.send")
    for _ in range(2):
        out = ok(forkq(workdir, "schema", "apply", database=db_url))
        assert f"schema version {SCHEMA_VERSION} applied" in out
    assert store.get_job(job_id) is not None


def test_schema_apply_creates_the_tables_of_a_new_database(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'new.db'}"
    ok(forkq(workdir, "schema", "apply", database=url))
    assert sql(url, "SELECT version FROM forkq_schema") == [(SCHEMA_VERSION,)]


def test_check_passes_on_a_good_setup(workdir: Path, db_url: str) -> None:
    out = ok(forkq(workdir, "check", "-c", "forkq.toml", database=db_url))
    lines = out.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["ok", "config"], ["ok", "handlers"], ["ok", "database"], ["ok", "schema"]
    ]  # fmt: skip
    assert "clihandlers" in lines[1] and "1 registered" in lines[1]
    # A [commands] table's programs are counted apart: they came from no module listed.
    with (workdir / "forkq.toml").open("a") as config:
        config.write('\n[commands."report.pdf"]\nargv = ["true"]\nqueue = "mail"\n')
    out = ok(forkq(workdir, "check", "-c", "forkq.toml", database=db_url))
    assert "clihandlers: 1 registered; [commands]: 1" in out.splitlines()[1], out


def test_check_fails_on_an_unreachable_database_without_showing_the_password(
    workdir: Path,
) -> None:
    url = f"mysql://forkq:pw-Unreachable-7781@127.0.0.1:{free_tcp_port()}/app"
    result = forkq(workdir, "check", "-c", "forkq.toml", database=url, timeout=30)
    assert result.returncode == 1, (result.stdout, result.stderr)
    fail = next(line for line in result.stdout.splitlines() if line.startswith("FAIL"))
    assert fail.split()[1] == "database" and "unreachable" in fail
    assert "forkq:***@127.0.0.1" in fail
    assert result.stderr.strip() == "forkq: error: check failed: database"
    assert "pw-Unreachable-7781" not in result.stdout + result.stderr


def test_check_fails_on_missing_tables_as_run_refuses_them(workdir: Path) -> None:
    (workdir / "empty.db").touch()  # an empty SQLite database: no tables
    url = f"sqlite:///{workdir / 'empty.db'}"
    result = forkq(workdir, "check", "-c", "forkq.toml", database=url)
    assert result.returncode == 78, (result.stdout, result.stderr)
    assert any(line.split()[:2] == ["FAIL", "schema"] for line in result.stdout.splitlines())
    failed(forkq(workdir, "run", "-c", "forkq.toml", database=url), 78)


def test_check_fails_on_an_older_schema_as_run_refuses_it(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'old.db'}"
    ok(forkq(workdir, "schema", "apply", database=url))
    sql(url, "UPDATE forkq_schema SET version = ?", (SCHEMA_VERSION - 1,))  # one behind
    result = forkq(workdir, "check", "-c", "forkq.toml", database=url)
    assert result.returncode == 78, (result.stdout, result.stderr)
    [line] = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    same = f"`forkq schema apply -c forkq.toml --database {url}`"  # as given to check and run
    assert line.split()[1] == "schema" and f"run {same}" in line, line
    line = failed(forkq(workdir, "run", "-c", "forkq.toml", database=url), 78)
    assert f"run {same}" in line, line


BROKEN_MODULES = {
    "raises": (
        "raise RuntimeError('half-written\\nmodule')\n",
        "RuntimeError: half-written module",
    ),
    "imports-nothing": (
        "import no_such_module_anywhere\n",
        "ModuleNotFoundError: No module named 'no_such_module_anywhere'",
    ),
}


@pytest.mark.parametrize("broken", sorted(BROKEN_MODULES))
def test_run_names_the_config_file_of_a_handler_module_that_fails_to_import(
    workdir: Path, broken: str
) -> None:
    source, reason = BROKEN_MODULES[broken]
    (workdir / "clihandlers.py").write_text(source)
    (workdir / "etc").mkdir()
    (workdir / "forkq.toml").rename(workdir / "etc" / "forkq.toml")
    url = f"sqlite:///{workdir / 'x.db'}"
    line = failed(forkq(workdir, "run", "-c", "etc/forkq.toml", database=url), 78)
    assert line == (
        "forkq: error: etc/forkq.toml: supervisor.handlers: module 'clihandlers'"
        f" failed to import: {reason}"
    )


@pytest.mark.parametrize("broken", sorted(BROKEN_MODULES))
def test_check_names_the_config_file_of_a_handler_module_that_fails_to_import(
    workdir: Path, broken: str
) -> None:
    source, reason = BROKEN_MODULES[broken]
    (workdir / "clihandlers.py").write_text(source)
    result = forkq(workdir, "check", "-c", "forkq.toml", database=f"sqlite:///{workdir / 'x.db'}")
    assert result.returncode == 78, (result.stdout, result.stderr)
    [line] = [line for line in result.stdout.splitlines() if line.split()[1] == "handlers"]
    assert line.split(None, 2) == [
        "FAIL",
        "handlers",
        f"forkq.toml: supervisor.handlers: module 'clihandlers' failed to import: {reason}",
    ]


@pytest.mark.parametrize("command", ["run", "check"])
def test_a_handler_module_not_on_the_path_is_named_with_where_forkq_looks(
    workdir: Path, command: str
) -> None:
    """The module exists, beside the app, but not where forkq's Python imports from (a
    console script does not search the current directory): the line says where to put it."""
    (workdir / "src" / "myapp").mkdir(parents=True)
    (workdir / "src" / "myapp" / "__init__.py").write_text("")
    (workdir / "src" / "myapp" / "jobs.py").write_text(HANDLER_MODULE)
    (workdir / "app.toml").write_text('[supervisor]\nhandlers = ["myapp.jobs"]\n')
    result = forkq(workdir, command, "-c", "app.toml", database=f"sqlite:///{workdir / 'x.db'}")
    assert result.returncode == 78, (result.stdout, result.stderr)
    if command == "run":
        line = failed(result, 78)
    else:
        [line] = [line for line in result.stdout.splitlines() if line.split()[1] == "handlers"]
    assert (
        "module 'myapp.jobs' failed to import: ModuleNotFoundError: No module named 'myapp'"
        f" (forkq imports it with {sys.executable}: install it there, or add its directory"
        " to PYTHONPATH)"
    ) in line


def test_the_upgrade_statements_of_the_latest_version_are_none(workdir: Path) -> None:
    out = ok(forkq(workdir, "schema", "print", "--upgrade-from", str(SCHEMA_VERSION)))
    assert out == ""
    older = ok(forkq(workdir, "schema", "print", "--upgrade-from", str(SCHEMA_VERSION - 1)))
    assert older.endswith(";\n") and "CREATE TABLE IF NOT EXISTS forkq_jobs " not in older


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--upgrade-from", "two"], "expected a whole number, got 'two'"),
        (["--upgrade-from", "0"], "schema versions start at 1, got 0"),
        (["--upgrade-from", str(SCHEMA_VERSION + 1)], "is newer than this forkq's"),
        (["--upgrade-from"], "expected one argument"),
    ],
    ids=["not-a-number", "zero", "newer", "missing"],
)
def test_schema_print_refuses_a_bad_upgrade_from(
    workdir: Path, args: list[str], message: str
) -> None:
    line = failed(forkq(workdir, "schema", "print", *args), 2)
    assert "--upgrade-from" in line and message in line


def test_upgrade_from_only_goes_with_schema_print(workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'x.db'}"
    line = failed(forkq(workdir, "schema", "apply", "--upgrade-from", "2", database=url), 2)
    assert "--upgrade-from" in line
    assert not (workdir / "x.db").exists()


def test_check_exits_78_on_a_bad_config(workdir: Path) -> None:
    (workdir / "clihandlers.py").write_text("import no_such_module_anywhere\n")
    result = forkq(workdir, "check", "-c", "forkq.toml", database=f"sqlite:///{workdir / 'x.db'}")
    assert result.returncode == 78
    assert any(line.split()[:2] == ["FAIL", "handlers"] for line in result.stdout.splitlines())
    (workdir / "forkq.toml").write_text("[supervisor]\nhandlers = 5\n")
    result = forkq(workdir, "check", "-c", "forkq.toml")
    assert result.returncode == 78 and "supervisor.handlers" in result.stdout


# --- secrets -----------------------------------------------------------------------------------

PASSWORD = "pw-Secret-4f1e9"
USER = "forkq_cli_pw"


@pytest.fixture
def password_url(mysql_db_url: str) -> Iterator[str]:
    """The test database through a MariaDB account that has a password."""
    conn = mysql_connect(mysql_db_url, database=False)
    name = database_name(mysql_db_url)
    try:
        with conn.cursor() as cursor:
            for host in ("%", "localhost", "127.0.0.1"):
                cursor.execute(
                    "CREATE OR REPLACE USER %s@%s IDENTIFIED BY %s", (USER, host, PASSWORD)
                )
                cursor.execute(f"GRANT ALL ON `{name}`.* TO %s@%s", (USER, host))
        server = parse_database_url(mysql_db_url)
        yield f"mysql://{USER}:{PASSWORD}@{server.host}:{server.port}/{name}"
    finally:
        with conn.cursor() as cursor:
            for host in ("%", "localhost", "127.0.0.1"):
                cursor.execute("DROP USER IF EXISTS %s@%s", (USER, host))
        conn.close()


def test_the_database_password_never_appears_in_output(
    workdir: Path, password_url: str, mysql_db_url: str
) -> None:
    store = open_store(password_url)
    try:
        job_id = Queue(store=store).enqueue("mail.send", {"n": 1})
        store.register_process("host-c:7:beef", "host-c", 7, "master")
    finally:
        store.close()
    outputs = []
    for args in (
        ["status"], ["status", "--json"], ["check", "-c", "forkq.toml"], ["jobs"],
        ["show", str(job_id)], ["schema", "apply"], ["show", "55555", "--debug"],
    ):  # fmt: skip
        result = forkq(workdir, *args, database=password_url)
        assert result.returncode == (1 if "55555" in args else 0), (args, result.stderr)
        outputs.append(result.stdout + result.stderr)
    wrong = password_url.replace(PASSWORD, PASSWORD + "-wrong")
    denied = forkq(workdir, "check", "-c", "forkq.toml", database=wrong)
    assert denied.returncode == 1 and "Access denied" in denied.stdout
    outputs.append(denied.stdout + denied.stderr)
    assert f"{USER}:***@" in outputs[2]  # check shows the URL, redacted
    assert all(PASSWORD not in text for text in outputs)


# --- in-process: what no subprocess can be made to do on purpose ------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_exception_is_one_line_unless_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], debug: bool
) -> None:
    def explode(*args: Any, **kwargs: Any) -> Store:
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(cli.logs, "setup", lambda **kwargs: None)
    monkeypatch.setattr(common, "open_store", explode)
    argv = ["status", "--database", "sqlite:///:memory:"] + (["--debug"] if debug else [])
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("forkq: internal error: RuntimeError: disk on fire second line")
    assert ("Traceback" in err) is debug
    if not debug:
        assert err.count("\n") == 1 and "run with --debug" in last


def test_ctrl_c_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Store:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.logs, "setup", lambda **kwargs: None)
    monkeypatch.setattr(common, "open_store", interrupted)
    assert cli.main(["jobs", "--database", "sqlite:///:memory:"]) == 130
