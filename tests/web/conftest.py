"""Fixtures for the dashboard's tests: a real `forkq web` (waitress, in its own session) on a
loopback port, and Debian's chromium driven by Playwright.

The browser is /usr/bin/chromium (scripts/ensure-tools.sh installs it); Playwright never
downloads one. A missing chromium or Playwright skips locally and fails when CI is set.
Each test gets a fresh browser context (no cookies), each server a config of its own.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from util import dies_with_us, free_tcp_port, in_ci, python, subprocess_env
from webutil import ServerFactory, WebServer, wait_serving, write_config

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def unavailable(reason: str) -> None:
    """Skip locally; fail on CI, where a skipped browser suite would hide a broken build."""
    if in_ci():
        pytest.fail(f"{reason} (CI is set: the browser tests must run)", pytrace=False)
    pytest.skip(reason)


# One browser a module, not a session: Playwright's sync API keeps an event loop running
# in the thread while it lives, and Django then refuses every database call of a later
# test in the same process ("You cannot call this from an async context"), as happens
# when `make test` hands a process a browser file before a Django one.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        unavailable(f"playwright is not installed: {exc}")
    if not Path(CHROMIUM).exists():
        unavailable(f"{CHROMIUM} is missing: run scripts/ensure-tools.sh")
    try:
        playwright = sync_playwright().start()  # the driver: a node bundled in the wheel
    except Exception as exc:
        unavailable(
            f"Playwright's driver does not start ({exc}): scripts/check-playwright.sh says why"
            " (on Debian its node needs libatomic1)"
        )
    try:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
    finally:
        playwright.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A page in a fresh context; confirm() dialogs are accepted, as an operator would."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())
    tab.set_default_timeout(15_000)
    yield tab
    context.close()


@pytest.fixture
def web_server(db_url: str, tmp_path: Path) -> Iterator[ServerFactory]:
    """Start `forkq web` on `db_url`: web_server(token=..., read_only=..., extra=...)."""
    started: list[WebServer] = []

    def start(
        token: str | None = None, read_only: bool = False, extra: str = "", supervisor: str = ""
    ) -> WebServer:
        config = write_config(tmp_path, extra, supervisor)
        port = free_tcp_port()
        env = subprocess_env(db_url, FORKQ_LOG_FORMAT="json")
        env.pop("FORKQ_WEB_TOKEN", None)
        if token:
            env["FORKQ_WEB_TOKEN"] = token
        log = tmp_path / f"web-{port}.log"
        argv = [python(), "-m", "supervisor", "web", "-c", str(config)]
        argv += ["--listen", f"127.0.0.1:{port}", *(["--read-only"] if read_only else [])]
        with open(log, "w") as out:
            proc = subprocess.Popen(
                argv,
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
                preexec_fn=dies_with_us(signal.SIGTERM),
            )
        server = WebServer(f"http://127.0.0.1:{port}", proc, log, config, token)
        started.append(server)
        wait_serving(server)
        return server

    yield start
    for server in started:
        server.stop()
