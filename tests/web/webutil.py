"""Helpers of the dashboard's tests: a `forkq web` process, its config, the CLI's JSON."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from util import python, subprocess_env

TOKEN = "test-token-0123456789abcdef"  # at least 16 characters, as the server requires
START_TIMEOUT = 30.0

CONFIG = """
[supervisor]
handlers = []
{supervisor}

[pools.email]
workers = 2

[schedules.nightly]
cron = "0 4 * * *"
timezone = "Asia/Tokyo"
handler = "reports.nightly"
queue = "reports"
payload = {{ kind = "daily" }}
{extra}
"""


def write_config(directory: Path, extra: str = "", supervisor: str = "") -> Path:
    """The dashboard's config; `supervisor`: lines of its [supervisor] table, `extra`: tables."""
    path = directory / "forkq.toml"
    path.write_text(CONFIG.format(extra=extra, supervisor=supervisor))
    return path


@dataclass
class WebServer:
    """One `forkq web` process on a loopback port."""

    url: str
    proc: subprocess.Popen[str]
    log: Path
    config: Path
    token: str | None = None

    def request(
        self,
        path: str,
        *,
        data: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, str, Any]:
        """(status, body, headers) of a GET (or a form POST with `data`), errors included;
        redirects are not followed."""
        body = None if data is None else urllib.parse.urlencode(data).encode()
        request = urllib.request.Request(self.url + path, data=body, headers=headers or {})
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=10) as response:
                return response.status, response.read().decode(), response.headers
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(), exc.headers

    def bearer(self) -> dict[str, str]:
        assert self.token
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# What the `web_server` fixture (conftest.py) hands out: web_server(**options) -> WebServer.
ServerFactory = Callable[..., WebServer]


def wait_serving(server: WebServer) -> None:
    """Until the server answers (its stylesheet needs no login), or fail with its log."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if server.proc.poll() is not None:
            raise AssertionError(f"forkq web exited at start:\n{server.log.read_text()}")
        try:
            if server.request("/static/dashboard.css")[0] == 200:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise AssertionError(f"forkq web did not answer:\n{server.log.read_text()}")
        time.sleep(0.05)


def forkq_json(db_url: str, config: Path, *args: str) -> Any:
    """`forkq ... --json` as an operator runs it, parsed."""
    result = subprocess.run(
        [python(), "-m", "supervisor", *args, "-c", str(config), "--json"],
        env=subprocess_env(db_url),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout)


def csrf_of(html: str) -> str:
    """The CSRF token a page's forms carry."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF token in the page"
    return found.group(1)
