#!/usr/bin/env bash
# Install with apt-get the real programs the test suite drives, when this machine lacks
# them (a fresh Debian 12 run as root: CI, `make test`). Idempotent; it never upgrades
# what is there. A program that cannot be installed fails here, loudly: with CI set the
# tests that need it would fail anyway, never skip.
#
set -euo pipefail

NEEDED=(
  libfaketime # tests/faults/test_faults_partition.py: a daemon whose clock is an hour off
  php-cli         # tests/store/test_php_client.py: clients/php run by Debian's real php
  php-mysql       # ... its PDO on MariaDB (pdo_mysql)
  php-sqlite3     # ... and on SQLite (pdo_sqlite)
  php-codesniffer # ... phpcs --standard=PSR12 on every PHP file
  chromium        # tests/web/: the dashboard driven by Playwright (never a browser download)
)

log() { echo "ensure-tools: $*" >&2; }

missing=()
for package in "${NEEDED[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  log "missing: ${missing[*]} (install them with apt-get as root)"
  [[ -n "${CI:-}" ]] && exit 1
  exit 0
fi
log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 ||
  { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
