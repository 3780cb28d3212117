"""Special characters in a database URL's user name and password (issue 12, item 8).

Percent-encoded, every character works, end to end against a real server whose user
has such a password. Written raw, a character either parses to exactly what was
meant (`[ ] @ :` in a password, a `%` that starts no escape) or is refused as a
one-line config error naming the fix (`/ ? #`, which end the user part of a URL) —
never an internal error, and never with the password in the message.
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
from supervisor.errors import ConfigError

SPECIALS = "[]@:/#?% "
# Parsed as written when raw: nothing else in a URL's authority can mean them.
RAW_OK = "[]@:% "
# End the user part of a URL (RFC 3986): refused raw, with the fix in the message.
RAW_REFUSED = "/#?"
MARKER = "Zq9pw"  # in every test password, so a leak is easy to see


def raw_url(password: str, host: str = "db.internal:3307") -> str:
    return f"mysql://forkq:{password}@{host}/app"


@pytest.mark.parametrize("char", list(SPECIALS))
def test_a_percent_encoded_special_character_is_part_of_the_password(char: str) -> None:
    password = f"{MARKER}{char}x{char}"
    url = parse_database_url(raw_url(quote(password, safe="")))
    assert (url.user, url.password, url.host, url.port, url.database) == (
        "forkq",
        password,
        "db.internal",
        3307,
        "app",
    )


@pytest.mark.parametrize("char", list(SPECIALS))
def test_a_percent_encoded_special_character_is_part_of_the_user_name(char: str) -> None:
    user = f"fq{char}user"
    url = parse_database_url(f"mysql://{quote(user, safe='')}:pw@db.internal/app")
    assert (url.user, url.password, url.host, url.port) == (user, "pw", "db.internal", 3306)


@pytest.mark.parametrize("char", list(RAW_OK))
def test_a_raw_character_that_cannot_be_misread_is_parsed_as_meant(char: str) -> None:
    password = f"{MARKER}{char}s{char}"
    url = parse_database_url(raw_url(password))
    assert (url.user, url.password, url.host, url.port, url.database) == (
        "forkq",
        password,
        "db.internal",
        3307,
        "app",
    )


@pytest.mark.parametrize("char", list(RAW_REFUSED))
def test_a_raw_character_that_ends_the_user_part_is_a_config_error(char: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_database_url(raw_url(f"{MARKER}{char}s"))
    message = str(caught.value)
    assert "percent-encode" in message
    assert MARKER not in message and "\n" not in message


@pytest.mark.parametrize(
    "password",
    ["[", "]", "][", "pa[ss", "a@b@c", "::", "%", "%zz", "[::1]", "a]:b", "a[b]@c:d"],
)
def test_a_raw_password_of_brackets_at_signs_and_colons_parses(password: str) -> None:
    url = parse_database_url(raw_url(password, "[::1]:3306"))
    assert (url.password, url.host, url.port) == (password, "::1", 3306)


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u:p@[::1/app",  # an unclosed IPv6 bracket
        "mysql://u:p@[::1]x/app",  # text after the bracket that is not a port
        "mysql://u:p@host:port/app",
        "mysql://u:p@host:70000/app",
        "mysql://u:p@host/app#frag",
    ],
)
def test_a_malformed_host_part_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_database_url(url)


def test_hosts_ports_and_socket_options_still_parse() -> None:
    url = parse_database_url("mysql://u:p%2Fw@[2001:db8::1]:3310/app?unix_socket=/run/my.sock")
    assert (url.host, url.port, url.password, url.unix_socket) == (
        "2001:db8::1",
        3310,
        "p/w",
        "/run/my.sock",
    )
    bare = parse_database_url("mysql://db.internal/app")
    assert (bare.user, bare.password, bare.host, bare.port) == ("", "", "db.internal", 3306)
    assert parse_database_url("mysql://u@/app").host == "127.0.0.1"


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
