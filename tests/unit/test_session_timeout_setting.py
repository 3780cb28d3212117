"""`[supervisor] db_session_timeout`: the session wait_timeout the daemon's own database
sessions set (whole seconds, 1 s to a year, 0 for the server's own; 600 s by default). What
the server does with it: tests/faults/test_session_timeout.py.
"""

from __future__ import annotations

import pytest

from supervisor.config import build_config
from supervisor.errors import ConfigError


def test_db_session_timeout_is_whole_seconds_from_1_to_a_year_or_0_for_the_servers() -> None:
    def value(raw: object) -> float:
        return build_config(
            {"supervisor": {"db_session_timeout": raw}}, "t.toml"
        ).supervisor.db_session_timeout

    assert build_config({}, "t.toml").supervisor.db_session_timeout == 600
    assert value("10m") == 600 and value(1) == 1 and value(0) == 0
    for bad in (0.5, 2.5, "1500ms", 31_536_001, -1, "soon", True):
        with pytest.raises(ConfigError, match=r"t\.toml: supervisor\.db_session_timeout: "):
            value(bad)
