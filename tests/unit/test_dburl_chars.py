"""Special characters in a database URL's user name and password (issue 12, item 8).

Percent-encoded, every character is part of the name or password. Written raw, a
character either parses to exactly what was meant (`[ ] @ :` in a password, a `%` that
starts no escape) or is refused as a one-line config error naming the fix (`/ ? #`,
which end the user part of a URL) — never an internal error, and never with the password
in the message. The command line and a real server whose user has such a password:
tests/daemon/test_dburl_chars_cli.py.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

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


@pytest.mark.parametrize("password", ["p@ss:w/rd%", "a@b/c", "@/"])
def test_a_raw_slash_after_an_at_sign_says_what_to_encode(password: str) -> None:
    """`p@ss:w/rd%` cut at the `/` read as the user `qa1user:p` at host `ss`, port `w`:
    "invalid port" said nothing of the password."""
    with pytest.raises(ConfigError) as caught:
        parse_database_url(raw_url(password))
    assert "percent-encoded (%2F" in str(caught.value)
    assert password not in str(caught.value)
