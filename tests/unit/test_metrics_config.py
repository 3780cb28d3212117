"""`[metrics] listen`: optional, checked like the other sections (exit 78 on a problem)."""

from __future__ import annotations

import pytest

from supervisor.config import build_config
from supervisor.errors import ConfigError

DB = {"url": "sqlite:///forkq.db"}


def test_metrics_are_off_without_the_section() -> None:
    assert build_config({"database": DB}, "t.toml").metrics.listen is None


def test_listen_takes_host_and_port() -> None:
    for listen in ("127.0.0.1:9740", "0.0.0.0:9740", "[::1]:9740"):
        config = build_config({"database": DB, "metrics": {"listen": listen}}, "t.toml")
        assert config.metrics.listen == listen


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"listen": "9740"}, "metrics.listen: expected HOST:PORT"),
        ({"listen": "127.0.0.1:70000"}, "metrics.listen: the port must be 1 to 65535"),
        ({"listen": 9740}, "metrics.listen: expected a string"),
        ({"port": 9740}, "metrics.port: unknown key"),
    ],
)
def test_a_bad_metrics_table_is_a_config_error(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        build_config({"database": DB, "metrics": table}, "t.toml")
    assert message in str(raised.value)
