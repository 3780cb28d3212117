"""Running Debian's php-cli against the test's database, for the PHP producer's tests
(store/test_php_client.py) and the daemon's side of them (daemon/test_php_daemon.py).

Each script is PRELUDE + a test's code: it requires clients/php/src/Queue.php, opens a
PDO on the test's database (MariaDB through pdo_mysql, SQLite through pdo_sqlite) and
prints JSON lines (`out()`); any PHP warning, notice or deprecation fails it. The
`php` and `run_php` fixtures (import `php_fixture`, `run_php_fixture`) skip locally and
fail when CI is set without php or its PDO drivers. `jobs()` and `db_now()` read back
what was stored, times as Decimal epoch seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from util import REPO_ROOT, backend_of, sql, unavailable

from supervisor.dburl import parse_database_url
from supervisor.wake import ENV_RUNTIME_DIR, ENV_WAKE

CLIENT_DIR = REPO_ROOT / "clients" / "php"
CLIENT = CLIENT_DIR / "src" / "Queue.php"
HANDLER_EXAMPLE = REPO_ROOT / "handlers" / "php" / "send_report.php"
PHP_FILES = sorted([*CLIENT_DIR.rglob("*.php"), *(REPO_ROOT / "handlers").rglob("*.php")])

# Every script starts with this: the client, a PDO on the test's database, warnings as
# errors, and `out()` / `attempt()` to report back as JSON lines.
PRELUDE = r"""<?php

declare(strict_types=1);

require getenv('FORKQ_PHP_CLIENT');

use Forkq\Queue;

set_error_handler(static function (int $no, string $message, string $file, int $line): never {
    throw new ErrorException($message, 0, $no, $file, $line);
});

function connect(): PDO
{
    $user = getenv('FORKQ_PHP_USER');
    $password = getenv('FORKQ_PHP_PASSWORD');
    return new PDO(getenv('FORKQ_PHP_DSN'), $user === '' ? null : $user, $password === '' ? null : $password);
}

function out(mixed $value): void
{
    echo json_encode($value, JSON_THROW_ON_ERROR), "\n";
}

/** The id an enqueue returned, or the class and message of what it threw. */
function attempt(callable $enqueue): array
{
    try {
        return ['id' => $enqueue()];
    } catch (Throwable $exc) {
        return ['error' => $exc::class, 'message' => $exc->getMessage()];
    }
}

/** A DateTimeImmutable at epoch seconds given as a string with microseconds, in $zone. */
function at(string $epoch, string $zone = 'UTC'): DateTimeImmutable
{
    return DateTimeImmutable::createFromFormat('U.u', $epoch)->setTimezone(new DateTimeZone($zone));
}

$pdo = connect();
"""


# --- running php -------------------------------------------------------------------------------


def php_binary() -> str:
    found = shutil.which("php")
    if found is None:
        unavailable("php is not installed: apt-get install php-cli php-mysql php-sqlite3")
    assert found is not None
    return found


@pytest.fixture(name="php", scope="module")
def php_fixture() -> str:
    """Debian's php-cli with both PDO drivers."""
    binary = php_binary()
    modules = subprocess.run(
        [binary, "-m"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.split()
    missing = [m for m in ("PDO", "pdo_mysql", "pdo_sqlite", "json") if m not in modules]
    if missing:
        unavailable(f"php lacks {missing}: apt-get install php-mysql php-sqlite3")
    return binary


def pdo_dsn(db_url: str) -> tuple[str, str, str]:
    """(DSN, user, password) of a PDO on the database a forkq URL names."""
    url = parse_database_url(db_url)
    if url.backend == "sqlite":
        return f"sqlite:{url.path}", "", ""
    where = (
        f"unix_socket={url.unix_socket}" if url.unix_socket else f"host={url.host};port={url.port}"
    )
    return (
        f"mysql:{where};dbname={url.database};charset=utf8mb4",
        url.user or "",
        url.password or "",
    )


class Php:
    """Runs PHP scripts against one database; each call is a fresh php process."""

    def __init__(self, binary: str, db_url: str, directory: Path) -> None:
        self.binary = binary
        self.db_url = db_url
        self.directory = directory
        self.runs = 0
        dsn, user, password = pdo_dsn(db_url)
        self.env = {
            **os.environ,
            "FORKQ_PHP_CLIENT": str(CLIENT),
            "FORKQ_PHP_DSN": dsn,
            "FORKQ_PHP_USER": user,
            "FORKQ_PHP_PASSWORD": password,
            # No daemon's socket directory: no nudge unless a test points here.
            ENV_RUNTIME_DIR: str(directory / "no-runtime-dir"),
        }
        self.env.pop(ENV_WAKE, None)

    def __call__(self, code: str, env: dict[str, str] | None = None) -> list[Any]:
        """Run PRELUDE + `code`; what it `out()`ed, one value a line. It must exit 0, silently."""
        self.runs += 1
        script = self.directory / f"script{self.runs}.php"
        script.write_text(PRELUDE + code + "\n", encoding="utf-8")
        done = subprocess.run(
            [self.binary, "-d", "display_errors=stderr", "-d", "error_reporting=-1", str(script)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**self.env, **(env or {})},
        )
        assert done.returncode == 0 and done.stderr == "", (
            f"php exited {done.returncode}\nstderr: {done.stderr}\nstdout: {done.stdout[-2000:]}"
        )
        return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.fixture(name="run_php")
def run_php_fixture(php: str, db_url: str, tmp_path: Path) -> Php:
    return Php(php, db_url, tmp_path)


# --- reading what was stored -------------------------------------------------------------------

COLUMNS = (
    "id, queue, handler, payload, priority, status, unique_key, limit_key, max_attempts, attempts,"
    " group_key"
)


def jobs(db_url: str) -> dict[int, dict[str, Any]]:
    """Every job row by id, its times as Decimal epoch seconds (run_at_s, enqueued_at_s)."""
    if backend_of(db_url) == "mysql":
        times = "UNIX_TIMESTAMP(run_at), UNIX_TIMESTAMP(enqueued_at)"
    else:
        times = "run_at, enqueued_at"
    names = [*COLUMNS.replace(" ", "").split(","), "run_at_s", "enqueued_at_s"]
    rows = sql(db_url, f"SELECT {COLUMNS}, {times} FROM forkq_jobs ORDER BY id")
    found = {}
    for row in rows:
        job = dict(zip(names, row, strict=True))
        job["run_at_s"] = round(Decimal(str(job["run_at_s"])), 6)
        job["enqueued_at_s"] = round(Decimal(str(job["enqueued_at_s"])), 6)
        found[int(job["id"])] = job
    return found


def db_now(db_url: str) -> Decimal:
    """The database clock (SQLite's is this host's), as Decimal epoch seconds."""
    if backend_of(db_url) == "mysql":
        return Decimal(str(sql(db_url, "SELECT UNIX_TIMESTAMP(NOW(6))")[0][0]))
    return round(Decimal(time.time()), 6)


def close(a: Decimal, b: Decimal | float, within: str = "0.000002") -> bool:
    """Equal to the microsecond (SQLite's REAL epoch seconds round in the last digit)."""
    return abs(a - Decimal(str(b))) <= Decimal(within)


def php_string(text: str) -> str:
    """A PHP single-quoted literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
