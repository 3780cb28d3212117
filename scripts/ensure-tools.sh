#!/usr/bin/env bash
# Install with apt-get the real programs the test suite drives, when this machine lacks
# them (a fresh Debian 12 run as root: CI, `make test`). Idempotent; it never upgrades
# what is there. A program that cannot be installed fails here, loudly: with CI set the
# tests that need it would fail anyway, never skip. Then it checks that Playwright's
# driver starts (scripts/check-playwright.sh), so a missing library is one message here,
# not an error in every browser test.
#
set -euo pipefail

NEEDED=(
  libfaketime # tests/faults/test_faults_partition.py: a daemon whose clock is an hour off
  php-cli         # tests/store/test_php_client.py: clients/php run by Debian's real php
  php-mysql       # ... its PDO on MariaDB (pdo_mysql)
  php-sqlite3     # ... and on SQLite (pdo_sqlite)
  php-codesniffer # ... phpcs --standard=PSR12 on every PHP file
  chromium        # tests/web/: the dashboard driven by Playwright (never a browser download)
  libatomic1      # ... Playwright's driver: its bundled node needs libatomic.so.1
  rsync           # tests/faults/test_faults_galera.py: the private Galera cluster's SST
  galera-4        # ... its provider, libgalera_smm.so (mariadb-server pulls it in too)
)

log() { echo "ensure-tools: $*" >&2; }

missing=()
for package in "${NEEDED[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done

install_missing() {
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    log "missing: ${missing[*]} (install them with apt-get as root)"
    [[ -n "${CI:-}" ]] && exit 1
    return 0
  fi
  # apt-get's output goes to a file, kept: on a bare Debian 12 it is ~260 packages and
  # a minute or two, and a failed attempt's lines are what says why.
  local aptlog
  aptlog=$(mktemp "${TMPDIR:-/tmp}/forkq-ensure-tools.XXXXXX.log")
  log "installing with apt-get: ${missing[*]} and what they need (on a bare Debian 12 about"
  log "260 packages, a minute or two; apt-get's output goes to $aptlog)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q "${missing[@]}" >>"$aptlog" 2>&1; then
    log "apt-get install failed: running apt-get update, then installing again"
    if ! { apt-get update -q && apt-get install -y -q "${missing[@]}"; } >>"$aptlog" 2>&1; then
      log "apt-get failed; the last lines of $aptlog:"
      tail -n 30 "$aptlog" | sed 's/^/  | /' >&2
      exit 1
    fi
  fi
  log "installed: ${missing[*]}"
}

[[ ${#missing[@]} -eq 0 ]] || install_missing
bash "$(dirname "$0")/check-playwright.sh"
