"""The demo's hints (issue 21.7): `handlers/demo_enqueue.py` prints, with the others, the
`forkq web` command of the demo's config, and that command, run as printed from the
checkout, serves the dashboard (the demo's `handlers` package imports from the checkout,
not from the wheel)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import urllib.request
from pathlib import Path

from util import REPO_ROOT, dies_with_us, free_tcp_port, python, sqlite_url_for, wait_until


def test_the_demo_prints_a_web_hint_that_serves_the_dashboard(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORKQ_", "PYTHONPATH"))}
    url = sqlite_url_for(tmp_path / "demo.db")
    argv = [python(), "handlers/demo_enqueue.py", "-c", "deploy/forkq.toml"]
    printed = subprocess.run(
        [*argv, "--database", url, "--apply-schema"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0, printed.stderr
    [hint] = [line for line in printed.stdout.splitlines() if " web -c " in line]
    assert "# the dashboard on http://127.0.0.1:8740/" in hint, hint
    command = shlex.split(hint.split("#", 1)[0])
    assert command[-4:] == ["-c", "deploy/forkq.toml", "--database", url], command
    port = free_tcp_port()
    with open(tmp_path / "web.log", "w") as log:
        server = subprocess.Popen(
            [*command, "--listen", f"127.0.0.1:{port}"],
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dies_with_us(signal.SIGTERM),
        )
    try:
        page = wait_until(
            lambda: _get(f"http://127.0.0.1:{port}/") or server.poll() is not None,
            timeout=30,
            message="the dashboard answering",
        )
        assert server.poll() is None, (tmp_path / "web.log").read_text()
        assert "Overview" in str(page)
    finally:
        server.terminate()
        server.wait(timeout=10)


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode()) if answer.status == 200 else None
    except OSError:
        return None
