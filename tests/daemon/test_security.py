"""Security properties users rely on:

- A row is data, never code: a handler name that is an importable path (`os.system`,
  `subprocess.run`, `builtins.eval`, `supervisor.cli.parser.main`, a module of our own with an
  import side effect) is never imported or called; the job ends dead, "unknown handler".
- Payloads are JSON only: a pickle is never unpickled; it ends dead as non-JSON.
- Secrets stay secret: the database password and FORKQ_SMTP_PASSWORD never appear in the
  daemon's logs, the process titles, `forkq status/show/jobs/check` or alert messages —
  with the database unreachable, the login refused, and the SMTP relay down, which is
  when errors (and the URLs in them) get printed.
- SQL is never built by string formatting (a static check of supervisor/).
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import structlog
import util
from daemon_util import Daemon, render_config, title_of
from private_mariadb import PrivateMariaDB, Webhook, private_mariadb  # noqa: F401
from util import REPO_ROOT, backend_of, free_tcp_port, wait_until

from supervisor import registry
from supervisor.cli import parser as cli
from supervisor.config import Config, PoolConfig
from supervisor.dburl import parse_database_url
from supervisor.models import JobState
from supervisor.store import Store, open_store
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


DB_PASSWORD = "Pw-7kQz93-dbleak"  # distinctive: found anywhere only if it leaked
WRONG_PASSWORD = "Pw-Wr0ng-88x-dbleak"
SMTP_PASSWORD = "Smtp-4nV8-relayleak"
WEBHOOK_TOKEN = "HookTok-51e7"
SECRETS = (DB_PASSWORD, WRONG_PASSWORD, SMTP_PASSWORD)
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
    assert row.last_error and row.last_error.startswith("payload is not valid JSON"), row.last_error
    assert not target.exists(), "the pickle was loaded"


# --- secrets ---------------------------------------------------------------------------------------


def leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


@pytest.fixture(scope="module")
def secure_server(private_mariadb: PrivateMariaDB) -> Iterator[PrivateMariaDB]:  # noqa: F811
    """The private server with a user whose password is distinctive, and a database."""
    private_mariadb.create_user("fq_sec", DB_PASSWORD, "forkq_sec")
    store = open_store(private_mariadb.url_for("fq_sec", DB_PASSWORD, "forkq_sec"))
    try:
        store.apply_schema()
    finally:
        store.close()
    yield private_mariadb


@pytest.fixture
def urls(secure_server: PrivateMariaDB) -> dict[str, str]:
    if not secure_server.alive():
        secure_server.start()
    secure_server.admin("DELETE FROM forkq_sec.forkq_jobs")  # each test starts with no jobs
    closed = free_tcp_port()
    return {
        "good": secure_server.url_for("fq_sec", DB_PASSWORD, "forkq_sec"),
        "unreachable": f"mysql://fq_sec:{DB_PASSWORD}@127.0.0.1:{closed}/forkq_sec",
        "refused": secure_server.url_for("fq_sec", WRONG_PASSWORD, "forkq_sec"),
    }


def alerts_section(webhook_url: str, smtp_port: int) -> str:
    return (
        "\n[alerts]\n"
        f"webhook_url = {json.dumps(webhook_url)}\n"
        'email_to = ["ops@example.com"]\n'
        'email_from = "forkq@example.com"\n'
        'smtp_host = "127.0.0.1"\n'
        f"smtp_port = {smtp_port}\n"
        'smtp_user = "forkq-alerts"\n'
        "smtp_timeout = 1\n"
        "webhook_timeout = 2\n"
        'cooldown = "1h"\n'
        "\n[alerts.defaults]\n"
        "max_dead = 0\n"
    )


def make_daemon(directory: Path, url: str, alerts: str) -> Daemon:
    """A daemon whose URL comes from FORKQ_DATABASE_URL (the file names a decoy)."""
    daemon = Daemon(
        directory,
        "sqlite:///decoy-never-used.db",
        pools={QUEUE: {"workers": 2, "timeout": 10}},
        env={"FORKQ_DATABASE_URL": url, "FORKQ_SMTP_PASSWORD": SMTP_PASSWORD},
    )
    daemon.write_config(text=render_config(daemon.db_url, daemon.pools, daemon.supervisor) + alerts)
    return daemon


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    hook.url = hook.url.replace("T0K3N", WEBHOOK_TOKEN)
    yield hook
    hook.close()


def test_a_daemon_that_cannot_log_in_says_why_without_the_password(
    urls: dict[str, str], tmp_path: Path
) -> None:
    for name in ("unreachable", "refused"):
        daemon = make_daemon(tmp_path / name, urls[name], alerts_section("http://127.0.0.1:9/x", 9))
        try:
            daemon.start()
            assert daemon.wait_exit(30) == 1, daemon.describe()
            output = daemon.log_text() + daemon.stderr_text()
            assert "forkq: error: database" in output, output
            assert leaks(output) == [], output
        finally:
            daemon.kill_all()


def test_no_secret_in_logs_titles_or_alerts_while_the_database_and_smtp_fail(
    secure_server: PrivateMariaDB, urls: dict[str, str], tmp_path: Path, webhook: Webhook
) -> None:
    smtp_port = free_tcp_port()  # nothing listens: every mail fails and is logged
    daemon = make_daemon(tmp_path / "good", urls["good"], alerts_section(webhook.url, smtp_port))
    try:
        daemon.start().wait_ready()
        insert_raw(urls["good"], "os.system", json.dumps("true"))  # dies: a max_dead alert
        wait_until(
            lambda: any("dead" in t for t in webhook.texts),
            timeout=20,
            message=f"the max_dead alert ({daemon.describe()})",
        )
        secure_server.kill9()  # the database goes away: errors, a db alert
        wait_until(
            lambda: any("database unreachable" in t for t in webhook.texts),
            timeout=20,
            message=f"the database alert ({webhook.texts})",
        )
        titles = [title_of(psutil.Process(daemon.pid)), *daemon.child_titles().values()]
        secure_server.start()
        wait_until(
            lambda: any("resolved" in t and "database" in t for t in webhook.texts),
            timeout=30,
            message=f"the database alert resolved ({webhook.texts})",
        )
        titles += [title_of(psutil.Process(daemon.pid)), *daemon.child_titles().values()]
        assert daemon.stop(timeout=30) == 0
    finally:
        daemon.kill_all()
    output = daemon.log_text() + daemon.stderr_text()
    assert daemon.events("alert_send_failed"), "the SMTP failure was never logged"
    assert daemon.events("db_unreachable"), "the outage was never logged"
    assert titles and all(t.startswith("forkq: ") for t in titles), titles
    assert leaks(output) == [] and WEBHOOK_TOKEN not in output, [
        line for line in output.splitlines() if leaks(line) or WEBHOOK_TOKEN in line
    ][:5]
    assert leaks(" ".join(titles)) == []
    assert leaks(" ".join(webhook.texts)) == [] and WEBHOOK_TOKEN not in " ".join(webhook.texts)


def test_no_secret_in_cli_output(
    urls: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key in list(os.environ):
        if key.startswith("FORKQ_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("FORKQ_SMTP_PASSWORD", SMTP_PASSWORD)
    monkeypatch.chdir(tmp_path)
    job_id = insert_raw(urls["good"], "os.system", json.dumps("true"))
    config = tmp_path / "forkq.toml"
    config.write_text(
        f"[database]\nurl = {json.dumps(urls['good'])}\n\n[pools.{QUEUE}]\nworkers = 1\n"
        + alerts_section(
            f"http://127.0.0.1:{free_tcp_port()}/hooks/{WEBHOOK_TOKEN}", free_tcp_port()
        )
    )
    commands = [
        ["status"],
        ["status", "--json"],
        ["jobs"],
        ["jobs", "--json"],
        ["show", str(job_id)],
        ["show", str(job_id), "--json"],
        ["check"],
        ["locks"],
    ]
    outputs = []
    for name, url in urls.items():
        for command in commands:
            for argv in ([*command, "--database", url], [*command, "-c", str(config)]):
                if name != "good" and argv[-2] == "-c":
                    continue
                capsys.readouterr()
                code = cli.main(argv)
                out, err = capsys.readouterr()
                outputs.append((name, argv, code, out + err))
        monkeypatch.setenv("FORKQ_DATABASE_URL", url)
        capsys.readouterr()
        code = cli.main(["status"])
        out, err = capsys.readouterr()
        outputs.append((name, ["status", "(FORKQ_DATABASE_URL)"], code, out + err))
        monkeypatch.delenv("FORKQ_DATABASE_URL")
    capsys.readouterr()
    code = cli.main(["alerts", "test", "-c", str(config)])
    out, err = capsys.readouterr()
    outputs.append(("good", ["alerts", "test"], code, out + err))

    assert [o for o in outputs if o[0] == "good" and o[2] not in (0,) and o[1][0] != "alerts"] == []
    assert all(o[2] == 1 for o in outputs if o[0] != "good" and o[1][0] != "check"), outputs
    assert "FAIL" in outputs[-1][3] and "email" in outputs[-1][3], outputs[-1]
    leaked = [(o[1], leaks(o[3])) for o in outputs if leaks(o[3]) or WEBHOOK_TOKEN in o[3]]
    assert leaked == []
    assert any("mysql://fq_sec:***@" in o[3] for o in outputs), "the URL is shown redacted"


def test_a_password_given_on_the_command_line_is_gone_from_the_titles(
    urls: dict[str, str], tmp_path: Path
) -> None:
    """`forkq run --database URL`, the worst case (FORKQ_DATABASE_URL is the advice): once
    the titles are set, /proc/PID/cmdline of the master and its children no longer shows it."""
    daemon = make_daemon(tmp_path / "argv", urls["good"], "")
    del daemon.extra_env["FORKQ_DATABASE_URL"]
    command = [
        sys.executable,
        "-m",
        "supervisor",
        "run",
        "-c",
        str(daemon.config_path),
        "--database",
        urls["good"],
    ]
    with open(daemon.log_path, "ab") as out:
        daemon.proc = subprocess.Popen(
            command,
            cwd=daemon.directory,
            env=daemon.environment(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    daemon.sid = daemon.proc.pid
    try:
        daemon.wait_ready()
        raw = [psutil.Process(daemon.pid).cmdline()] + [c.cmdline() for c in daemon.children()]
        titles = [" ".join(argv).strip() for argv in raw]
        assert titles[0] == "forkq: master" and len(titles) == 3, titles
        assert leaks(" ".join(titles)) == []
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait_exit(30) == 0
    finally:
        daemon.kill_all()
    assert leaks(daemon.log_text()) == []


# --- SQL is never built by string formatting ----------------------------------------------------

SUPERVISOR = REPO_ROOT / "supervisor"
SQL_WORDS = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|REPLACE|PRAGMA|CREATE|DROP|ALTER|TRUNCATE|GRANT|KILL|"
    r"BEGIN|COMMIT|ROLLBACK|WHERE|VALUES)\b|\bforkq_[a-z_]+\b"
)
EXECUTORS = {"execute", "executemany", "executescript", "mogrify"}
# The one documented exception: MariaDB's multi-row INSERT ... RETURNING joins rows that
# the driver escaped one by one (cursor.mogrify of the named row template).
ALLOWED = {("store/mysql.py", "_insert_returning")}


class SqlBuilding(ast.NodeVisitor):
    """Finds SQL text built with f-strings, % or .format, and execute() calls whose SQL is
    neither a literal nor a named query."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.function = "<module>"
        self.found: list[tuple[str, str, int, str]] = []
        self.query_names: set[str] = set()  # local names bound to a named query

    def report(self, node: ast.AST, what: str) -> None:
        self.found.append((self.path, self.function, getattr(node, "lineno", 0), what))

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer, outer_names = self.function, self.query_names
        self.function, self.query_names = node.name, set()
        for inner in ast.walk(node):
            if isinstance(inner, ast.Assign) and is_named_query(inner.value):
                self.query_names |= {t.id for t in inner.targets if isinstance(t, ast.Name)}
            if (
                isinstance(inner, ast.For)
                and isinstance(inner.target, ast.Name)
                and isinstance(inner.iter, ast.Name)  # for statement in statements (DDL)
            ):
                self.query_names.add(inner.target.id)
        self.generic_visit(node)
        self.function, self.query_names = outer, outer_names

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        literal = "".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
        if SQL_WORDS.search(literal):
            self.report(node, f"f-string {literal.strip()[:60]!r}")
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        for side in (node.left, node.right):
            if (
                isinstance(node.op, ast.Mod | ast.Add)
                and isinstance(side, ast.Constant)
                and isinstance(side.value, str)
                and SQL_WORDS.search(side.value)
            ):
                self.report(node, f"{type(node.op).__name__} on {side.value.strip()[:60]!r}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "format"
            and isinstance(func.value, ast.Constant)
            and isinstance(func.value.value, str)
            and SQL_WORDS.search(func.value.value)
        ):
            self.report(node, f".format on {func.value.value.strip()[:60]!r}")
        if isinstance(func, ast.Attribute) and func.attr in EXECUTORS and node.args:
            sql = node.args[0]
            fine = (
                (isinstance(sql, ast.Constant) and isinstance(sql.value, str))
                or is_named_query(sql)
                or (isinstance(sql, ast.Name) and sql.id in self.query_names)
            )
            if not fine:
                self.report(node, f".{func.attr}() of {ast.unparse(sql)[:60]}")
        self.generic_visit(node)


def is_named_query(node: ast.AST) -> bool:
    """queries["claim"], self.queries[name], QUERIES[...]."""
    if not isinstance(node, ast.Subscript):
        return False
    base = node.value
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return str(name).lower() == "queries"


def sql_building() -> list[tuple[str, str, int, str]]:
    found = []
    for path in sorted(SUPERVISOR.rglob("*.py")):
        visitor = SqlBuilding(str(path.relative_to(SUPERVISOR)))
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        found += visitor.found
    return found


def test_no_sql_is_built_by_string_formatting_in_the_python_sources() -> None:
    found = [f for f in sql_building() if (f[0], f[1]) not in ALLOWED]
    assert found == [], (
        "SQL built by formatting (use a named query and bound values):\n"
        + "\n".join(
            f"  supervisor/{path}:{line} in {function}: {what}"
            for path, function, line, what in found
        )
    )


def test_the_static_check_finds_what_it_looks_for() -> None:
    """The checker itself: each way of building SQL it must catch, caught."""
    source = """
def f(cursor, table, n, queries):
    cursor.execute(f"SELECT * FROM {table}")
    cursor.execute("DELETE FROM forkq_jobs WHERE id = %d" % n)
    cursor.execute("UPDATE forkq_jobs SET x = {}".format(n))
    cursor.execute("SELECT 1 FROM " + table)
    text = "anything"
    cursor.execute(text)
    cursor.execute(queries["claim"], {})
    cursor.execute("SELECT 1")
"""
    visitor = SqlBuilding("example.py")
    visitor.visit(ast.parse(source))
    lines = sorted({line for _, _, line, _ in visitor.found})
    assert lines == [3, 4, 5, 6, 8], visitor.found


def test_the_named_query_files_bind_every_value() -> None:
    """mysql.sql uses only %(name)s placeholders, sqlite.sql only :name; no {} templates,
    no positional %s a caller could fill by formatting."""
    mysql = (SUPERVISOR / "store" / "mysql.sql").read_text(encoding="utf-8")
    sqlite = (SUPERVISOR / "store" / "sqlite.sql").read_text(encoding="utf-8")
    bodies = {}
    for name, text in (("mysql.sql", mysql), ("sqlite.sql", sqlite)):
        lines = text.splitlines()
        bodies[name] = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
        assert not re.search(r"[{}]", bodies[name]), f"{name}: a template placeholder"
    mysql_body, sqlite_body = bodies["mysql.sql"], bodies["sqlite.sql"]
    assert re.findall(r"%(?!\(\w+\)s)", mysql_body) == [], "mysql.sql: a % that is not %(name)s"
    assert "%" not in sqlite_body and "?" not in sqlite_body, "sqlite.sql binds only :name"
