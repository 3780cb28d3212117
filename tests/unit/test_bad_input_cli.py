"""Bad input through the config file and the command line: mutated copies of the example
config, nonsense argument lists, ids too big for the database.

The rule each test checks: bad input ends in a clear, contained outcome — a ConfigError
(exit 78), a usage error (exit 2), a one-line error (exit 1) — or simply works. It never
prints a traceback. `forkq` runs in-process (`cli.main`) but for two subprocess checks;
a database is at most a throwaway SQLite file. Payloads, raw rows and names:
tests/store/test_bad_input.py. Hypothesis runs derandomized, so a run is repeatable.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from util import REPO_ROOT, python, subprocess_env

from supervisor.cli import parser as cli
from supervisor.config import Config, load_config
from supervisor.errors import ConfigError

pytestmark = pytest.mark.timeout(120, method="thread")  # the worker's soft timeout owns SIGALRM


@pytest.fixture(autouse=True)
def fresh_logging() -> Iterator[None]:
    """An in-process `cli.main` binds structlog to the stdout pytest captured for that test,
    which is closed afterwards: start and end every test with structlog's defaults."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


EXAMPLE_CONFIG = REPO_ROOT / "deploy" / "forkq.toml"
FUZZ = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# --- config files --------------------------------------------------------------------------------

EXAMPLE_LINES = EXAMPLE_CONFIG.read_text(encoding="utf-8").splitlines()
ASSIGNMENTS = [
    i for i, line in enumerate(EXAMPLE_LINES) if "=" in line and not line.lstrip().startswith("#")
]
toml_values = st.sampled_from(
    [
        "1",
        "-5",
        "0",
        "3.5",
        "-0.0",
        "nan",
        "inf",
        "-inf",
        "1e400",
        "9223372036854775807",
        "true",
        "false",
        '""',
        '"x"',
        '"5m"',
        '"-1s"',
        '"1e999"',
        '"NaNs"',
        "[]",
        "[1, 2]",
        '["a", 1]',
        '["handlers.nope"]',
        "{}",
        "{ a = 1 }",
        "1979-05-27T07:32:00Z",
        "1979-05-27",
        "07:32:00",
        '"sqlite:///"',
        '"mysql://u:p@127.0.0.1:1/db"',
        '"mysql://127.0.0.1:99999/db"',
        '"postgres://x/y"',
        '"http://"',
        '"* * * * * * *"',
        '"Mars/Olympus_Mons"',
        '"../../etc/passwd"',
        '"delete"',
        '"keep"',
        "'literal'",
        '"""multi\nline"""',
    ]
) | st.text(max_size=12).map(lambda s: json.dumps("v-" + s, ensure_ascii=False))
junk_keys = st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True) | st.just('"quoted key"')


@st.composite
def mutated_example_config(draw: st.DrawFn) -> str:
    """deploy/forkq.toml with one to three mutations: delete a line, give a key a value of
    another type, or insert a junk key."""
    lines = list(EXAMPLE_LINES)
    for _ in range(draw(st.integers(1, 3))):
        operation = draw(st.sampled_from(["delete", "retype", "junk"]))
        if operation == "delete" and lines:
            del lines[draw(st.integers(0, len(lines) - 1))]
        elif operation == "retype":
            candidates = [i for i in ASSIGNMENTS if i < len(lines) and "=" in lines[i]]
            if candidates:
                i = draw(st.sampled_from(candidates))
                key = lines[i].split("=", 1)[0]
                lines[i] = f"{key}= {draw(toml_values)}"
        else:
            at = draw(st.integers(0, len(lines)))
            lines.insert(at, f"{draw(junk_keys)} = {draw(toml_values)}")
    return "\n".join(lines) + "\n"


def check_loaded(config: Config) -> None:
    """A config that loads is one the daemon can use."""
    sup = config.supervisor
    for seconds in (
        sup.check_interval,
        sup.shutdown_timeout,
        sup.poll_interval,
        sup.heartbeat_interval,
        sup.process_stale_after,
        sup.chores_lease,
        config.alerts.cooldown,
    ):
        assert seconds == seconds and seconds != float("inf"), config
    for pool in config.pools:
        assert 0 <= pool.workers <= pool.max_workers, pool
        assert pool.timeout > 0 and pool.timeout != float("inf"), pool


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No FORKQ_* variables from the caller; the working directory is a scratch one
    (the example's sqlite:///var/forkq.db is relative to it)."""
    for key in list(os.environ):
        if key.startswith("FORKQ_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_example_config_loads(clean_env: Path) -> None:
    check_loaded(load_config(EXAMPLE_CONFIG))


@FUZZ
@given(text=mutated_example_config())
def test_a_mutated_config_loads_or_is_a_config_error(clean_env: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".toml", dir=clean_env, delete=False) as f:
        f.write(text)
    try:
        config = load_config(f.name)
    except ConfigError as exc:
        message = str(exc)
        assert message and all(line.startswith(f.name) for line in message.splitlines()), message
        return
    finally:
        os.unlink(f.name)
    check_loaded(config)


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_failure(code: int, err: str, allowed: tuple[int, ...]) -> None:
    assert code in allowed, (code, err)
    assert "Traceback" not in err, err
    assert "internal error" not in err, err
    lines = err.splitlines()
    if code == 0:
        return
    assert lines and all(line.startswith("forkq: error: ") for line in lines), err
    if code != 78:  # a config error lists one problem a line; anything else is one line
        assert len(lines) == 1, err


@settings(FUZZ, max_examples=15)
@given(text=mutated_example_config())
def test_forkq_check_on_a_mutated_config_exits_cleanly(
    clean_env: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    path = clean_env / "mutated.toml"
    path.write_text(text, encoding="utf-8")
    code, out, err = run_cli(["check", "-c", str(path)], capsys)
    assert_clean_failure(code, err, (0, 1, 78))
    assert "Traceback" not in out
    try:
        load_config(path)
    except ConfigError:
        assert code == 78, (code, out, err)


def test_forkq_check_subprocess_on_a_broken_config_exits_78_without_traceback(
    tmp_path: Path,
) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(EXAMPLE_CONFIG.read_text().replace("workers = 2", 'workers = "two"'))
    env = subprocess_env("sqlite:///unused.db")
    env.pop("FORKQ_DATABASE_URL")
    result = subprocess.run(
        [python(), "-m", "supervisor", "check", "-c", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 78, result
    assert "Traceback" not in result.stdout + result.stderr
    assert "pools.default.workers" in result.stdout + result.stderr


# --- command lines ---------------------------------------------------------------------------------

WORDS = [
    "enqueue",
    "status",
    "jobs",
    "show",
    "retry",
    "cancel",
    "pause",
    "resume",
    "purge",
    "schema",
    "check",
    "locks",
    "schedules",
    "schedule",
    "add",
    "--cron",
    "alerts",
    "print",
    "apply",
    "test",
    "-c",
    "--config",
    "--database",
    "--debug",
    "--json",
    "--queue",
    "--queues",
    "--delay",
    "--at",
    "--priority",
    "--unique-key",
    "--max-attempts",
    "--status",
    "--limit",
    "--dead",
    "--done",
    "--older-than",
    "--burst",
    "--max-jobs",
    "-1",
    "0",
    "7",
    "1e3",
    "5m",
    "{}",
    '{"a":',
    "nope.toml",
    "sqlite:///fuzz.db",
    "mysql://u:p@127.0.0.1:1/db",
    "dead",
    "x" * 70,
]
COMMANDS = [
    "enqueue",
    "status",
    "jobs",
    "show",
    "retry",
    "cancel",
    "pause",
    "resume",
    "purge",
    "schema",
    "check",
    "locks",
    "schedules",
    "schedule",
    "alerts",
]
argument = st.sampled_from(WORDS) | st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=10
)
command_lines = st.lists(argument, max_size=5) | st.builds(
    lambda command, rest: [command, *rest],
    st.sampled_from(COMMANDS),
    st.lists(argument, max_size=4),
)


@settings(FUZZ, max_examples=80)
@given(argv=command_lines)
def test_nonsense_command_lines_exit_cleanly(
    clean_env: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    if any(word in ("run", "work") for word in argv):  # those would start to work
        return
    code, out, err = run_cli(argv, capsys)
    if "--debug" in argv:  # tracebacks are what --debug is for
        assert code in (0, 1, 2, 78), (code, err)
        return
    assert_clean_failure(code, err, (0, 1, 2, 78))
    assert "Traceback" not in out


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["frobnicate"],
        ["show"],
        ["show", "abc"],
        ["show", "-5"],
        ["jobs", "--limit", "many"],
        ["jobs", "--status", "sleeping"],
        ["enqueue", "h", "{not json"],
        ["enqueue", "h", "--delay", "5 parsecs"],
        ["enqueue", "h", "--at", "yesterday"],
        ["enqueue", "h", "--delay", "5", "--at", "2030-01-01T00:00:00"],
        ["pause", "q" * 65],
        ["retry"],
        ["retry", "1", "--dead"],
        ["schema", "drop"],
        ["--no-such-flag", "status"],
    ],
)
def test_usage_errors_exit_2_with_one_line(
    clean_env: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, _, err = run_cli(argv, capsys)
    assert code == 2, (code, err)
    assert_clean_failure(code, err, (2,))


@pytest.mark.parametrize(
    "argv, code",
    [
        (["status", "-c", "does-not-exist.toml"], 78),
        (["status", "--database", "postgres://x/y"], 78),
        (["status", "--database", "mysql://u:p@127.0.0.1:1/db"], 1),
        (["show", "1", "--database", "sqlite:///fresh.db"], 1),  # no schema yet
    ],
)
def test_valid_usage_with_a_bad_config_or_database_exits_78_or_1(
    clean_env: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int
) -> None:
    got, _, err = run_cli(argv, capsys)
    assert got == code, (got, err)
    assert_clean_failure(got, err, (code,))


@pytest.mark.parametrize("command", [["show"], ["retry"], ["cancel"]])
def test_a_job_id_too_big_for_the_database_is_a_clean_error(
    clean_env: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    url = "sqlite:///big.db"
    assert run_cli(["schema", "apply", "--database", url], capsys)[0] == 0
    code, _, err = run_cli([*command, "99999999999999999999", "--database", url], capsys)
    assert_clean_failure(code, err, (1, 2))


def test_the_cli_subprocess_turns_nonsense_into_exit_2(tmp_path: Path) -> None:
    env = subprocess_env("sqlite:///fuzz.db")
    result = subprocess.run(
        [python(), "-m", "supervisor", "jobs", "--limit", "'; DROP TABLE forkq_jobs; --"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("forkq: error: ")
