#!/usr/bin/env bash
# Check that Playwright's driver starts and drives Debian's chromium, before the suite:
# the driver is a node binary bundled in the playwright wheel, and on a bare Debian 12 it
# lacks libatomic.so.1 (scripts/ensure-tools.sh installs libatomic1). Without this check
# every browser test fails with "Connection closed while reading from the driver" and the
# cause only shows under "Captured stderr setup". One message here instead, exit 1.
#
# PY names the venv's python (the Makefile passes it); without playwright installed in it
# there is nothing to check (the suite reports that itself).
set -euo pipefail

PY=${PY:-.venv/bin/python}
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

"$PY" -c 'import playwright' 2>/dev/null || exit 0

output=$("$PY" - "$CHROMIUM" 2>&1 <<'PYTHON'
import sys

from playwright.sync_api import sync_playwright

with sync_playwright() as playwright:  # starts the driver (node)
    browser = playwright.chromium.launch(executable_path=sys.argv[1], args=["--headless", "--no-sandbox"])
    browser.close()
PYTHON
) && exit 0

driver=$("$PY" -c 'from playwright._impl._driver import compute_driver_executable as c; print(c()[0])' 2>/dev/null || true)
{
  echo "check-playwright: Playwright's driver${driver:+ ($driver)} does not start or cannot drive $CHROMIUM,"
  echo "so every browser test in tests/web would fail. On Debian its bundled node needs"
  echo "libatomic1 (scripts/ensure-tools.sh installs it). What it said:"
  echo "$output" | tail -n 25 | sed 's/^/  | /'
} >&2
exit 1
