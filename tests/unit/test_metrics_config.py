"""`[metrics] listen`: optional, checked like the other sections (exit 78 on a problem)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from util import REPO_ROOT, python

from supervisor.config import build_config
from supervisor.errors import ConfigError

DB = {"url": "sqlite:///forkq.db"}


def test_metrics_are_off_without_the_section() -> None:
    assert build_config({"database": DB}, "t.toml").metrics.listen is None


def test_listen_takes_host_and_port() -> None:
    for listen in ("127.0.0.1:9740", "0.0.0.0:9740", "[::1]:9740", "localhost:9740", "a-b.c:1"):
        config = build_config({"database": DB, "metrics": {"listen": listen}}, "t.toml")
        assert config.metrics.listen == listen


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"listen": "9740"}, "metrics.listen: expected HOST:PORT"),
        ({"listen": "127.0.0.1:70000"}, "metrics.listen: the port must be 1 to 65535"),
        # The server refused these only once started (an internal error, exit 1).
        ({"listen": " 127.0.0.1:9740"}, "metrics.listen: expected an IP address or a host"),
        ({"listen": "localhost.:9740"}, "metrics.listen: expected an IP address or a host"),
        ({"listen": "256.1.1.1:9740"}, "metrics.listen: expected an IP address or a host"),
        ({"listen": 9740}, "metrics.listen: expected a string"),
        ({"port": 9740}, "metrics.port: unknown key"),
    ],
)
def test_a_bad_metrics_table_is_a_config_error(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        build_config({"database": DB, "metrics": table}, "t.toml")
    assert message in str(raised.value)


# `forkq` on a machine without the metrics extra: prometheus-client hidden from the import
# system (None in sys.modules: find_spec says it is not there, an import fails).
WITHOUT_EXTRA = (
    "import sys; sys.modules['prometheus_client'] = None;"
    " from supervisor.cli.parser import main; raise SystemExit(main())"
)


def test_only_the_daemon_and_check_need_prometheus_client_for_a_metrics_table(
    tmp_path: Path,
) -> None:
    """A producer's machine shares the daemon's config file: `[metrics] listen` there must
    not stop `forkq enqueue`, `jobs`, `status` (nor Queue.from_config) where the extra is
    not installed. `forkq run` and `forkq check` refuse it, before anything forks (78)."""
    config = tmp_path / "forkq.toml"
    db = tmp_path / "q.db"
    config.write_text(
        f'[database]\nurl = "sqlite:///{db}"\n\n[metrics]\nlisten = "127.0.0.1:1"\n',
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKQ_")}
    env["PYTHONPATH"] = str(REPO_ROOT)

    def forkq(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python(), "-c", WITHOUT_EXTRA, *argv, "-c", str(config)],
            env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip

    assert forkq("schema", "apply").returncode == 0
    for argv in (("enqueue", "t.job", "{}"), ("jobs",), ("status",)):
        done = forkq(*argv)
        assert done.returncode == 0, (argv, done.stderr)
        assert "prometheus" not in done.stderr, (argv, done.stderr)
    for argv in (("run",), ("check",)):
        done = forkq(*argv)
        assert done.returncode == 78, (argv, done.stdout, done.stderr)
        said = done.stdout + done.stderr
        assert "metrics.listen: needs prometheus-client" in said, (argv, said)
        assert "Traceback" not in said, (argv, said)
