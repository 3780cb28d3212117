"""Before the suite, `make tools` checks that Playwright's driver starts (issue 21.9): on a
bare Debian 12 its bundled node lacks libatomic.so.1, and every browser test then failed
with "Connection closed while reading from the driver", the cause buried in captured
stderr. scripts/check-playwright.sh says it once; ensure-tools.sh installs libatomic1."""

from __future__ import annotations

import os
import subprocess
import sys

from util import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "check-playwright.sh"


def check(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=REPO_ROOT,
        env={**os.environ, "PY": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_check_passes_when_the_driver_drives_chromium() -> None:
    passed = check()
    assert passed.returncode == 0 and passed.stderr == "", passed.stderr


def test_a_driver_that_does_not_start_is_one_clear_message() -> None:
    # The driver's node replaced by a program that exits at once, as a node that cannot
    # load its libraries does.
    failed = check(PLAYWRIGHT_NODEJS_PATH="/bin/false")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    first = failed.stderr.splitlines()[0]
    assert first.startswith("check-playwright: Playwright's driver (/bin/false) does not start")
    assert "libatomic1" in failed.stderr
    assert failed.stderr.count("check-playwright:") == 1


def test_ensure_tools_installs_libatomic_and_runs_the_check() -> None:
    text = (REPO_ROOT / "scripts" / "ensure-tools.sh").read_text()
    needed = text[text.index("NEEDED=(") : text.index("\n)\n", text.index("NEEDED=("))]
    assert "\n  libatomic1 " in needed
    assert "check-playwright.sh" in text
