"""Special characters in a database URL's password (issue 12, item 8), end to end: `forkq`
as a subprocess refuses a raw `/` as a config error (exit 78, one line, no password),
reaches the server with a raw `[`, stops the daemon on a bad URL from the environment or
the file; and a private MariaDB whose user has a password with every special character
accepts it percent-encoded. How such URLs parse: tests/unit/test_dburl_chars.py.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from private_mariadb import PrivateMariaDB, private_mariadb  # noqa: F401 - fixture
from util import free_tcp_port, subprocess_env

from supervisor import Queue
from supervisor.dburl import parse_database_url

MARKER = "Zq9pw"  # in every test password, so a leak is easy to see


def raw_url(password: str, host: str = "db.internal:3307") -> str:
    return f"mysql://forkq:{password}@{host}/app"


# --- the command line: a config error, exit 78, one line, no password ---------------------------


def forkq(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = subprocess_env("sqlite:///unused.db", FORKQ_LOG_FORMAT="json", **env)
    environ.pop("FORKQ_CONFIG", None)
    if "FORKQ_DATABASE_URL" not in env:
        environ.pop("FORKQ_DATABASE_URL")
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )


BRACKET_URL = raw_url(f"{MARKER}[x]", "127.0.0.1:1")  # parsed as meant; nothing listens
SLASH_URL = raw_url(f"{MARKER}/x", "127.0.0.1:1")  # refused: percent-encode the `/`


@pytest.mark.parametrize("command", ["run", "check", "status", "enqueue t.x"])
def test_a_raw_slash_in_the_password_is_a_config_error_on_the_command_line(
    tmp_path: Path, command: str
) -> None:
    result = forkq(tmp_path, *command.split(), "--database", SLASH_URL)
    assert result.returncode == 78, (result.stdout, result.stderr)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert MARKER not in result.stdout + result.stderr
    assert "percent-encoded" in result.stdout + result.stderr


@pytest.mark.parametrize("command", ["check", "status", "enqueue t.x"])
def test_a_raw_bracket_in_the_password_reaches_the_server_not_an_internal_error(
    tmp_path: Path, command: str
) -> None:
    result = forkq(tmp_path, *command.split(), "--database", BRACKET_URL)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert "unreachable" in result.stdout + result.stderr  # it tried to connect: parsed
    assert MARKER not in result.stdout + result.stderr


def test_a_bad_url_from_the_environment_or_the_file_stops_the_daemon(tmp_path: Path) -> None:
    from_env = forkq(tmp_path, "run", FORKQ_DATABASE_URL=SLASH_URL)
    (tmp_path / "forkq.toml").write_text(f'[database]\nurl = "{SLASH_URL}"\n')
    from_file = forkq(tmp_path, "run", "-c", "forkq.toml")
    for result in (from_env, from_file):
        assert result.returncode == 78, result.stderr
        assert MARKER not in result.stdout + result.stderr
        assert "internal error" not in result.stderr


# --- a real server: a password with every special character logs in ------------------------------


@pytest.fixture(scope="module")
def special_user(private_mariadb: PrivateMariaDB) -> Iterator[tuple[PrivateMariaDB, str]]:  # noqa: F811
    password = f"{MARKER}[a]b@c:d/e#f?g%h i%41"
    private_mariadb.create_user("fq_chars", password, "forkq_chars")
    yield private_mariadb, password


def test_a_percent_encoded_password_with_every_special_character_logs_in(
    special_user: tuple[PrivateMariaDB, str], tmp_path: Path
) -> None:
    server, password = special_user
    if not server.alive():
        server.start()
    url = f"mysql://fq_chars:{quote(password, safe='')}@127.0.0.1:{server.port}/forkq_chars"
    assert parse_database_url(url).password == password
    applied = forkq(tmp_path, "schema", "apply", "--database", url)
    assert applied.returncode == 0, applied.stderr
    queue = Queue(url)
    try:
        job_id = queue.enqueue("t.noop", {"n": 1}, queue="chars")
        assert queue.get(job_id) is not None
    finally:
        queue.close()
    checked = forkq(tmp_path, "check", "--database", url)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert MARKER not in checked.stdout + checked.stderr


def test_the_same_password_written_raw_is_refused_not_misread(tmp_path: Path) -> None:
    url = raw_url(f"{MARKER}[a]b@c:d/e#f?g%h", f"127.0.0.1:{free_tcp_port()}")
    result = forkq(tmp_path, "check", "--database", url)
    assert result.returncode == 78, result.stdout + result.stderr
    assert MARKER not in result.stdout + result.stderr
