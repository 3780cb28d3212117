"""The PHP producer (clients/php, `Forkq\\Queue::enqueue`) driven by Debian's real php-cli.

Each test writes a short PHP script that requires clients/php/src/Queue.php, opens a PDO
on the test's database (MariaDB through pdo_mysql, SQLite through pdo_sqlite: the
`db_url` fixture's two backends) and prints JSON lines; the test reads the rows back
through Python (php_util.py runs the scripts). Any PHP warning, notice or deprecation
fails the script (the prelude turns them into exceptions, and stderr must stay empty).
A job enqueued from PHP run by the real daemon, the same-host nudge and the command
handler example: tests/daemon/test_php_daemon.py. Without php, its PDO drivers or
phpcs the tests skip locally and fail when CI is set (`make test` installs them
through scripts/ensure-tools.sh).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from decimal import Decimal
from pathlib import Path

import pytest
from php_util import (
    CLIENT,
    CLIENT_DIR,
    HANDLER_EXAMPLE,
    PHP_FILES,
    Php,
    close,
    db_now,
    jobs,
    php_binary,
    php_fixture,  # noqa: F401  (the `php` fixture)
    php_string,
    run_php_fixture,  # noqa: F401  (the `run_php` fixture)
)
from util import backend_of, count_rows, sql, unavailable

from supervisor.store import Store, open_store
from supervisor.store.limits import fair

# --- the files themselves ----------------------------------------------------------------------


def test_every_php_file_passes_php_lint() -> None:
    binary = php_binary()
    assert CLIENT in PHP_FILES and HANDLER_EXAMPLE in PHP_FILES
    for path in PHP_FILES:
        done = subprocess.run([binary, "-l", str(path)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, f"{path}: {done.stdout}{done.stderr}"
        assert "No syntax errors detected" in done.stdout


def test_every_php_file_follows_psr12() -> None:
    phpcs = shutil.which("phpcs")
    if phpcs is None:
        unavailable("phpcs is not installed: apt-get install php-codesniffer")
    assert phpcs is not None
    done = subprocess.run(
        [phpcs, "--standard=PSR12", "--report=emacs", *map(str, PHP_FILES)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_composer_autoloads_forkq_from_src_and_needs_only_php_extensions() -> None:
    manifest = json.loads((CLIENT_DIR / "composer.json").read_text(encoding="utf-8"))
    assert manifest["autoload"]["psr-4"] == {"Forkq\\": "src/"}
    assert (CLIENT_DIR / "src" / "Queue.php").is_file()  # Forkq\Queue under PSR-4
    assert set(manifest["require"]) == {"php", "ext-json", "ext-pdo"}
    assert manifest["require"]["php"] == ">=8.2"
    source = CLIENT.read_text(encoding="utf-8")
    assert "declare(strict_types=1);" in source and "namespace Forkq;" in source
    assert "final class Queue" in source


# --- what enqueue stores -----------------------------------------------------------------------


def test_a_job_with_defaults_is_stored_ready_to_run_now(run_php: Php, db_url: str) -> None:
    before = db_now(db_url)
    [job_id] = run_php("out(Queue::enqueue($pdo, 'email.send', ['to' => 'a@example.com']));")
    after = db_now(db_url)
    [job] = jobs(db_url).values()
    assert job["id"] == job_id
    assert (job["queue"], job["handler"], job["status"]) == ("default", "email.send", "ready")
    assert json.loads(job["payload"]) == {"to": "a@example.com"}
    assert job["priority"] == 0 and job["attempts"] == 0
    assert job["max_attempts"] is None  # the handler's default
    assert job["unique_key"] is None and job["limit_key"] is None
    assert job["run_at_s"] == job["enqueued_at_s"]
    assert before - 1 <= job["enqueued_at_s"] <= after + 1


def test_every_option_is_stored(run_php: Php, db_url: str) -> None:
    [job_id] = run_php(
        """out(Queue::enqueue($pdo, 'report.pdf', ['day' => '2026-01-31'], [
            'queue' => 'reports',
            'delay' => 30,
            'priority' => -7,
            'unique_key' => 'report-2026-01-31',
            'limit_key' => 'tenant-42',
            'max_attempts' => 3,
        ]));"""
    )
    job = jobs(db_url)[job_id]
    assert job["queue"] == "reports" and job["handler"] == "report.pdf"
    assert json.loads(job["payload"]) == {"day": "2026-01-31"}
    assert job["priority"] == -7 and job["max_attempts"] == 3
    assert job["unique_key"] == "report-2026-01-31" and job["limit_key"] == "tenant-42"
    assert job["status"] == "scheduled"
    assert close(job["run_at_s"] - job["enqueued_at_s"], 30)


def test_tags_are_stored_as_the_python_api_stores_them(
    run_php: Php, db_url: str, store: Store
) -> None:
    now, later, keyed = run_php(
        """out(Queue::enqueue($pdo, 'h', [], ['tags' => ['billing', 'eu', 'billing']]));
        out(Queue::enqueue($pdo, 'h', [], ['tags' => ['late'], 'delay' => 30]));
        out(Queue::enqueue($pdo, 'h', [], ['tags' => ['k'], 'unique_key' => 'u-1']));"""
    )
    tags = {i: store.get_job(i).tags for i in (now, later, keyed)}  # type: ignore[union-attr]
    assert tags == {now: '["billing","eu"]', later: '["late"]', keyed: '["k"]'}
    [untagged] = run_php("out(Queue::enqueue($pdo, 'h', [], ['tags' => []]));")
    assert store.get_job(untagged).tags is None  # type: ignore[union-attr]


def test_null_options_take_their_defaults(run_php: Php, db_url: str) -> None:
    [job_id] = run_php(
        """out(Queue::enqueue($pdo, 'h', [], ['queue' => null, 'delay' => null, 'run_at' => null,
            'priority' => null, 'unique_key' => null, 'limit_key' => null, 'max_attempts' => null]));"""
    )
    job = jobs(db_url)[job_id]
    assert (job["queue"], job["status"], job["priority"]) == ("default", "ready", 0)
    assert job["unique_key"] is None and job["limit_key"] is None and job["max_attempts"] is None
    assert job["run_at_s"] == job["enqueued_at_s"]


@pytest.mark.parametrize(
    ("delay", "status"),
    [
        ("0", "ready"),
        ("0.25", "ready"),
        ("2", "ready"),  # due exactly at the horizon: claimable now, like Python's
        ("2.001", "scheduled"),
        ("3", "scheduled"),
        ("3600", "scheduled"),
    ],
)
def test_a_job_due_more_than_two_seconds_ahead_is_scheduled(
    run_php: Php, db_url: str, delay: str, status: str
) -> None:
    [job_id] = run_php(f"out(Queue::enqueue($pdo, 'h', [], ['delay' => {delay}]));")
    job = jobs(db_url)[job_id]
    assert job["status"] == status
    assert close(job["run_at_s"] - job["enqueued_at_s"], Decimal(delay))


def test_run_at_is_an_absolute_instant_whatever_its_time_zone(run_php: Php, db_url: str) -> None:
    now = db_now(db_url)
    cases = {
        "later": (now + 3600, "Asia/Kolkata", None, "scheduled"),
        "past": (now - 30, "America/New_York", None, "ready"),
        "in_a_second": (now + 1, "Pacific/Chatham", None, "ready"),
        "wins_over_delay": (now - 5, "UTC", 3600, "ready"),
        "delay_is_ignored": (now + 600, "Europe/Paris", 1, "scheduled"),
    }
    lines = []
    for name, (epoch, zone, delay, _) in cases.items():
        options = f"'run_at' => at('{epoch:.6f}', '{zone}')"
        if delay is not None:
            options += f", 'delay' => {delay}"
        lines.append(f"out(['{name}', Queue::enqueue($pdo, 'h', [], [{options}])]);")
    ids = dict(run_php("\n".join(lines)))
    stored = jobs(db_url)
    for name, (epoch, _, _, status) in cases.items():
        job = stored[ids[name]]
        assert (name, job["status"]) == (name, status)
        assert close(job["run_at_s"], epoch), (name, job["run_at_s"], epoch)


def test_a_mysql_session_in_another_time_zone_stores_the_same_instants(
    mysql_db_url: str, php: str, tmp_path: Path
) -> None:
    """run_at goes in as epoch seconds (FROM_UNIXTIME), so the session's zone cannot move it."""
    run_php = Php(php, mysql_db_url, tmp_path)
    now = db_now(mysql_db_url)
    later, earlier = now + 7200, now - 60
    [zone, first, second, third] = run_php(
        f"""$pdo->exec("SET time_zone = '-07:00'");
        $a = Queue::enqueue($pdo, 'h', [], ['run_at' => at('{later:.6f}')]);
        $b = Queue::enqueue($pdo, 'h', [], ['run_at' => at('{earlier:.6f}', 'Asia/Tokyo')]);
        $c = Queue::enqueue($pdo, 'h', [], ['delay' => 10]);
        out($pdo->query('SELECT @@session.time_zone')->fetchColumn());
        out($a);
        out($b);
        out($c);"""
    )
    assert zone == "-07:00"  # left as the caller set it
    stored = jobs(mysql_db_url)
    assert close(stored[first]["run_at_s"], later) and stored[first]["status"] == "scheduled"
    assert close(stored[second]["run_at_s"], earlier) and stored[second]["status"] == "ready"
    assert close(stored[third]["run_at_s"] - stored[third]["enqueued_at_s"], 10)
    assert stored[third]["status"] == "scheduled"


def test_a_connection_that_is_not_utf8_is_refused_for_text_that_is_not_ascii(
    mysql_db_url: str, php: str, tmp_path: Path
) -> None:
    """On `SET NAMES latin1` MySQL converted a key's UTF-8 bytes into other letters (the
    payload, JSON with ASCII escapes, came through): a key no longer matched Python's."""
    run_php = Php(php, mysql_db_url, tmp_path)
    [plain, refused] = run_php(
        """$pdo->exec('SET NAMES latin1');
        out(Queue::enqueue($pdo, 'h', ['name' => 'ключ'], ['unique_key' => 'ascii-key']));
        out(attempt(fn() => Queue::enqueue($pdo, 'h', [], ['unique_key' => 'ключ-é'])));"""
    )
    assert jobs(mysql_db_url)[plain]["unique_key"] == "ascii-key"
    assert refused["error"] == "InvalidArgumentException"
    assert "connection character set is latin1: open it with charset=utf8mb4" in refused["message"]
    assert len(jobs(mysql_db_url)) == 1


def faketime(offset: str) -> dict[str, str]:
    found = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not found:
        unavailable("libfaketime is not installed: apt-get install libfaketime (make test does)")
    return {
        "LD_PRELOAD": str(found[0]),
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }


def test_mysql_judges_delay_and_status_on_the_database_clock(
    php: str, mysql_db_url: str, tmp_path: Path
) -> None:
    """A PHP host an hour behind the database: delays count from the database's now, and a
    run_at that is ahead by the PHP host's clock but past by the database's is ready."""
    run_php = Php(php, mysql_db_url, tmp_path)
    before = db_now(mysql_db_url)
    [php_now, delayed, absolute] = run_php(
        """out(microtime(true));
        out(Queue::enqueue($pdo, 'h', [], ['delay' => 10]));
        out(Queue::enqueue($pdo, 'h', [], ['run_at' => new DateTimeImmutable('+10 minutes')]));""",
        env=faketime("-1h"),
    )
    after = db_now(mysql_db_url)
    assert before - Decimal(php_now) > 3000, "libfaketime did not move php's clock"
    stored = jobs(mysql_db_url)
    assert before + 10 <= stored[delayed]["run_at_s"] <= after + 10
    assert stored[delayed]["status"] == "scheduled"
    assert stored[absolute]["run_at_s"] < before
    assert stored[absolute]["status"] == "ready"


def test_sqlite_accepts_a_run_at_after_2038_and_mysql_refuses_it_clearly(
    run_php: Php, db_url: str
) -> None:
    [result] = run_php(
        "out(attempt(fn () => Queue::enqueue($pdo, 'h', [], "
        "['run_at' => new DateTimeImmutable('2040-01-01T00:00:00Z')])));"
    )
    if backend_of(db_url) == "sqlite":
        assert jobs(db_url)[result["id"]]["run_at_s"] == 2208988800
    else:
        assert result["error"] == "InvalidArgumentException"
        assert "before 2038-01-19 03:14:08 UTC" in result["message"]
        assert count_rows(db_url, "forkq_jobs") == 0


def test_a_run_at_from_the_year_3000_is_refused_on_sqlite(run_php: Php, db_url: str) -> None:
    """The daemon ends a SQLite job whose run_at is past the year 3000 dead (a raw INSERT's
    milliseconds): the client refuses one before the INSERT, unique or not (MySQL refuses
    it as past 2038)."""
    results = run_php(
        "$late = new DateTimeImmutable('3000-01-01T00:00:00Z');"
        " out(attempt(fn () => Queue::enqueue($pdo, 'h', [], ['run_at' => $late])));"
        " out(attempt(fn () => Queue::enqueue($pdo, 'h', [], ['run_at' => $late, 'unique_key' => 'k'])));"
        " out(attempt(fn () => Queue::enqueue($pdo, 'h', [], ['delay' => 1e12])));"
    )
    for result in results:
        assert result["error"] == "InvalidArgumentException", result
        if backend_of(db_url) == "sqlite":
            assert "before 3000-01-01 00:00:00 UTC on SQLite" in result["message"], result
    assert count_rows(db_url, "forkq_jobs") == 0


MYSQL_LAST_EPOCH = 2147483647  # 2038-01-19 03:14:07 UTC, a TIMESTAMP's last second


@pytest.mark.parametrize("sql_mode", ["strict", "empty"])
def test_a_delay_past_2038_is_refused_on_mysql_before_anything_is_written(
    run_php: Php, db_url: str, sql_mode: str
) -> None:
    """With strict sql_mode the INSERT failed (1292); with sql_mode = '' the job was
    stored to run in 1970, at once; 9e12 s overflowed the server's date arithmetic (1441)."""
    mode = "''" if sql_mode == "empty" else "'STRICT_TRANS_TABLES'"
    results = run_php(
        f"""if ($pdo->getAttribute(PDO::ATTR_DRIVER_NAME) === 'mysql') {{ $pdo->exec("SET SESSION sql_mode = {mode}"); }}
        $to2040 = 2208988800 - time();
        out(attempt(fn () => Queue::enqueue($pdo, 'h', [], ['delay' => $to2040])));
        out(attempt(fn () => Queue::enqueue($pdo, 'h', [], ['delay' => 9e12])));
        out(attempt(fn () => Queue::enqueue($pdo, 'h', [], ['delay' => {MYSQL_LAST_EPOCH} - time() + 30.5])));
        out(attempt(fn () => Queue::enqueue($pdo, 'h', [], ['delay' => {MYSQL_LAST_EPOCH} - time() - 3600])));"""
    )
    stored = jobs(db_url)
    if backend_of(db_url) == "sqlite":  # SQLite keeps any time before the year 3000
        assert [("id" in result) for result in results] == [True, False, True, True], results
        assert stored[results[0]["id"]]["run_at_s"] > Decimal(2208988800 - 5)
        return
    *refused, fits = results
    for result in refused:
        assert result.get("error") == "InvalidArgumentException", result
        assert "delay must end before 2038-01-19 03:14:08 UTC" in result["message"], result
    assert list(stored) == [fits["id"]]
    assert MYSQL_LAST_EPOCH - 3700 < stored[fits["id"]]["run_at_s"] < MYSQL_LAST_EPOCH


def test_payloads_are_stored_as_json_the_daemon_decodes(run_php: Php, db_url: str) -> None:
    payloads = run_php(
        r"""final class Invoice implements JsonSerializable
        {
            public function jsonSerialize(): mixed
            {
                return ['invoice' => 17, 'total' => 1.0];
            }
        }
        $object = new stdClass();
        $object->name = 'Zoë';
        $object->tags = [];
        foreach ([
            ['text' => "Grüße, 世界 \u{1F600} \"quoted\" 'single' back\\slash a/b </script>\n\ttab \0nul"],
            ['float' => 1.0, 'int' => 1, 'neg' => -0.5, 'big' => PHP_INT_MAX, 'null' => null,
             'bools' => [true, false], 'nested' => ['list' => [1, [2, []]], 'map' => ['k' => 'v']]],
            [],
            $object,
            new Invoice(),
            [3, 1, 2],
        ] as $payload) {
            out(Queue::enqueue($pdo, 'h', $payload));
        }"""
    )
    stored = jobs(db_url)
    texts = [stored[i]["payload"] for i in payloads]
    assert all(text.isascii() for text in texts), texts  # \u escapes: no charset can garble it
    decoded = [json.loads(text) for text in texts]
    assert decoded[0] == {
        "text": "Grüße, 世界 \U0001f600 \"quoted\" 'single' back\\slash a/b </script>\n\ttab \0nul"
    }
    assert decoded[1] == {
        "float": 1.0,
        "int": 1,
        "neg": -0.5,
        "big": 2**63 - 1,
        "null": None,
        "bools": [True, False],
        "nested": {"list": [1, [2, []]], "map": {"k": "v"}},
    }
    assert isinstance(decoded[1]["float"], float) and isinstance(decoded[1]["int"], int)
    assert decoded[2] == {} and texts[2] == "{}"  # the default payload is an empty object
    assert decoded[3] == {"name": "Zoë", "tags": []}
    assert decoded[4] == {"invoice": 17, "total": 1.0}
    assert decoded[5] == [3, 1, 2]


# --- unique keys and transactions --------------------------------------------------------------


def test_a_taken_unique_key_returns_the_existing_jobs_id(run_php: Php, db_url: str) -> None:
    [first, again, other] = run_php(
        """out(Queue::enqueue($pdo, 'welcome', ['n' => 1], ['unique_key' => 'welcome-42']));
        out(Queue::enqueue($pdo, 'welcome', ['n' => 2],
            ['unique_key' => 'welcome-42', 'priority' => 9, 'delay' => 60, 'queue' => 'other']));
        out(Queue::enqueue($pdo, 'welcome', ['n' => 3], ['unique_key' => 'welcome-43']));"""
    )
    [from_another_process, in_a_transaction] = run_php(
        """out(Queue::enqueue($pdo, 'welcome', ['n' => 4], ['unique_key' => 'welcome-42']));
        $pdo->beginTransaction();
        out(Queue::enqueue($pdo, 'welcome', ['n' => 5], ['unique_key' => 'welcome-42', 'delay' => 5]));
        $pdo->commit();"""
    )
    assert first == again == from_another_process == in_a_transaction
    assert other != first
    stored = jobs(db_url)
    assert sorted(stored) == sorted([first, other])
    kept = stored[first]
    assert json.loads(kept["payload"]) == {"n": 1}  # the first enqueue's job, untouched
    assert (kept["queue"], kept["priority"], kept["status"]) == ("default", 0, "ready")
    assert json.loads(stored[other]["payload"]) == {"n": 3}


def test_rollback_of_the_callers_transaction_leaves_no_job(run_php: Php, db_url: str) -> None:
    [job_id, still_open, seen_by_another_connection, after] = run_php(
        """$pdo->beginTransaction();
        $pdo->exec("INSERT INTO forkq_queues (queue, paused) VALUES ('app-work', 0)");
        out(Queue::enqueue($pdo, 'h', ['n' => 1], ['unique_key' => 'once']));
        out($pdo->inTransaction());
        out((int) connect()->query('SELECT COUNT(*) FROM forkq_jobs')->fetchColumn());
        $pdo->rollBack();
        out((int) $pdo->query('SELECT COUNT(*) FROM forkq_jobs')->fetchColumn());"""
    )
    assert isinstance(job_id, int) and job_id > 0
    assert still_open is True  # enqueue neither committed nor ended the transaction
    assert seen_by_another_connection == 0
    assert after == 0
    assert count_rows(db_url, "forkq_jobs") == 0
    assert count_rows(db_url, "forkq_queues") == 0  # the caller's own write went with it
    # The key was never taken: the next enqueue with it makes a job.
    [new_id] = run_php("out(Queue::enqueue($pdo, 'h', ['n' => 2], ['unique_key' => 'once']));")
    assert json.loads(jobs(db_url)[new_id]["payload"]) == {"n": 2}


def test_commit_of_the_callers_transaction_keeps_its_jobs(run_php: Php, db_url: str) -> None:
    [first, second, unseen, still_open] = run_php(
        """$pdo->beginTransaction();
        $pdo->exec("INSERT INTO forkq_queues (queue, paused) VALUES ('app-work', 0)");
        out(Queue::enqueue($pdo, 'h', ['n' => 1]));
        out(Queue::enqueue($pdo, 'h', ['n' => 2], ['delay' => 60, 'unique_key' => 'k']));
        out((int) connect()->query('SELECT COUNT(*) FROM forkq_jobs')->fetchColumn());
        out($pdo->inTransaction());
        $pdo->commit();"""
    )
    assert unseen == 0 and still_open is True
    assert sorted(jobs(db_url)) == sorted([first, second])
    assert count_rows(db_url, "forkq_queues") == 1


def test_outside_a_transaction_the_insert_commits_by_itself(run_php: Php, db_url: str) -> None:
    [job_id, in_transaction] = run_php(
        """out(Queue::enqueue($pdo, 'h'));
        out($pdo->inTransaction());"""
    )
    assert in_transaction is False
    assert list(jobs(db_url)) == [job_id]


def test_errors_throw_whatever_the_callers_error_mode_which_is_left_as_it_was(
    run_php: Php, db_url: str
) -> None:
    silent, warning = "PDO::ERRMODE_SILENT", "PDO::ERRMODE_WARNING"
    [ok, mode_after_ok, failed, mode_after_failure, bad, mode_after_bad] = run_php(
        f"""$pdo->setAttribute(PDO::ATTR_ERRMODE, {silent});
        out(Queue::enqueue($pdo, 'h'));
        out($pdo->getAttribute(PDO::ATTR_ERRMODE) === {silent});
        // A table of this session shadows forkq_jobs: the INSERT itself fails.
        $pdo->exec('CREATE TEMPORARY TABLE forkq_jobs (id INTEGER)');
        $pdo->setAttribute(PDO::ATTR_ERRMODE, {warning});
        out(attempt(fn () => Queue::enqueue($pdo, 'h')));
        out($pdo->getAttribute(PDO::ATTR_ERRMODE) === {warning});
        out(attempt(fn () => Queue::enqueue($pdo, '')));
        out($pdo->getAttribute(PDO::ATTR_ERRMODE) === {warning});"""
    )
    assert isinstance(ok, int) and mode_after_ok is True
    assert failed["error"] == "PDOException" and "queue" in failed["message"]
    assert mode_after_failure is True
    assert bad["error"] == "InvalidArgumentException" and mode_after_bad is True
    assert list(jobs(db_url)) == [ok]


# --- bad input ---------------------------------------------------------------------------------

BAD_INPUT = [
    ("''", "[]", "handler must be a UTF-8 name of 1 to 191 characters"),
    ("str_repeat('h', 192)", "[]", "handler must be"),
    ('"bad\\xff"', "[]", "handler must be"),
    ("'h'", "['queue' => str_repeat('q', 65)]", "queue must be a UTF-8 name of at most 64"),
    ("'h'", "['queue' => 5]", "queue must be"),
    ("'h'", "['tags' => 'billing']", "tags must be a list"),
    ("'h'", "['tags' => ['ok', '']]", "tags must be UTF-8 names of 1 to 64"),
    ("'h'", "['tags' => [str_repeat('t', 65)]]", "tags must be UTF-8 names"),
    ("'h'", "['queue' => \"q\\xc3\"]", "queue must be"),
    ("'h'", "['delay' => -1]", "delay must be a finite number of seconds >= 0"),
    ("'h'", "['delay' => NAN]", "delay must be"),
    ("'h'", "['delay' => INF]", "delay must be"),
    ("'h'", "['delay' => '5']", "delay must be"),
    ("'h'", "['delay' => 1e13]", "delay must be"),
    ("'h'", "['priority' => 1.5]", "priority must be a 32-bit integer"),
    ("'h'", "['priority' => 2147483648]", "priority must be"),
    ("'h'", "['priority' => -2147483649]", "priority must be"),
    ("'h'", "['priority' => true]", "priority must be"),
    ("'h'", "['max_attempts' => 0]", "max_attempts must be an integer from 1 to 2147483647"),
    ("'h'", "['max_attempts' => '3']", "max_attempts must be"),
    ("'h'", "['unique_key' => '']", "unique_key must be a UTF-8 string of 1 to 191"),
    ("'h'", "['unique_key' => str_repeat('k', 192)]", "unique_key must be"),
    ("'h'", "['limit_key' => 42]", "limit_key must be a UTF-8 string of 1 to 191"),
    ("'h'", "['limit_key' => '']", "limit_key must be"),
    ("'h'", "['limit_key' => \"k\\0x\"]", "limit_key must not hold a NUL character"),
    ("'h'", "['unique_key' => 'u2 ']", "unique_key must not end with a space"),
    ("'h'", "['group_key' => 'g ']", "group_key must not end with a space"),
    ("'h'", "['run_at' => '2030-01-01 00:00:00']", "run_at must be a DateTimeInterface"),
    ("'h'", "['run_at' => 1893456000]", "run_at must be a DateTimeInterface"),
    ("'h'", "['run_at' => new DateTimeImmutable('1969-12-31')]", "run_at must be after 1970"),
    ("'h'", "['dealy' => 5]", "unknown enqueue option(s): dealy; known: queue, delay"),
    ("'h'", "[0 => 5, 'Queue' => 'q']", "unknown enqueue option(s): 0, Queue"),
]

BAD_PAYLOADS = [
    ("['x' => NAN]", "payload must be JSON-encodable: Inf and NaN"),
    ("['x' => \"\\xb1\\x31\"]", "payload must be JSON-encodable: Malformed UTF-8"),
    (
        "['f' => fopen('php://memory', 'r')]",
        "payload must be JSON-encodable: Type is not supported",
    ),
    ("(function () { $a = []; $a['self'] = &$a; return $a; })()", "payload must be JSON-encodable"),
]


def test_bad_input_is_refused_with_a_clear_error_and_writes_nothing(
    run_php: Php, db_url: str
) -> None:
    calls = [
        f"Queue::enqueue($pdo, {handler}, ['ok' => 1], {options})"
        for handler, options, _ in BAD_INPUT
    ]
    calls += [f"Queue::enqueue($pdo, 'h', {payload})" for payload, _ in BAD_PAYLOADS]
    expected = [message for _, _, message in BAD_INPUT] + [message for _, message in BAD_PAYLOADS]
    results = run_php("\n".join(f"out(attempt(fn () => {call}));" for call in calls))
    assert len(results) == len(calls)
    for call, message, result in zip(calls, expected, results, strict=True):
        assert result.get("error") == "InvalidArgumentException", (call, result)
        assert message in result["message"], (call, result["message"])
    assert count_rows(db_url, "forkq_jobs") == 0


def test_a_payload_of_the_wrong_type_is_a_type_error(run_php: Php, db_url: str) -> None:
    [result] = run_php("out(attempt(fn () => Queue::enqueue($pdo, 'h', 'a string')));")
    assert result["error"] == "TypeError" and "$payload" in result["message"]
    assert count_rows(db_url, "forkq_jobs") == 0


def test_a_group_key_is_stored_and_its_tenant_joins_the_round(run_php: Php, db_url: str) -> None:
    """group_key: the job's tenant in a fair pool, served in turn by the fair claim."""
    [flood, small] = run_php(
        """Queue::enqueue($pdo, 'h', [], ['queue' => 'shared', 'group_key' => 'big']);
        out(Queue::enqueue($pdo, 'h', [], ['queue' => 'shared', 'group_key' => 'big']));
        out(Queue::enqueue($pdo, 'h', [], ['queue' => 'shared', 'group_key' => 'small',
            'unique_key' => 'u-1']));"""
    )
    assert jobs(db_url)[small]["group_key"] == "small"
    # Both tenants joined the queue's round at enqueue, not first seen by a claim.
    assert sorted(sql(db_url, "SELECT queue, tenant FROM forkq_tenants")) == [
        ("shared", "big"),
        ("shared", "small"),
    ]
    store = open_store(db_url)
    try:
        claimed = [fair.complete_and_claim(store, {}, "shared", "h1", 1, 60.0)[0] for _ in "ab"]
    finally:
        store.close()
    stored = jobs(db_url)
    assert [stored[batch[0].id]["group_key"] for batch in claimed] == ["big", "small"]
    assert flood not in [batch[0].id for batch in claimed]  # the big tenant's first came first


def test_names_and_numbers_at_their_limits_are_accepted(run_php: Php, db_url: str) -> None:
    handler, queue, unique, limit = "é" * 191, "q" * 64, "ü" * 191, "→" * 191
    [low, high] = run_php(
        f"""out(Queue::enqueue($pdo, {php_string(handler)}, [], ['queue' => {php_string(queue)},
            'unique_key' => {php_string(unique)}, 'limit_key' => {php_string(limit)},
            'priority' => -2147483648, 'max_attempts' => 1]));
        out(Queue::enqueue($pdo, 'h', [], ['priority' => 2147483647, 'max_attempts' => 2147483647]));"""
    )
    stored = jobs(db_url)
    assert (stored[low]["handler"], stored[low]["queue"]) == (handler, queue)
    assert (stored[low]["unique_key"], stored[low]["limit_key"]) == (unique, limit)
    assert (stored[low]["priority"], stored[low]["max_attempts"]) == (-(2**31), 1)
    assert (stored[high]["priority"], stored[high]["max_attempts"]) == (2**31 - 1, 2**31 - 1)


# --- MySQL specifics ---------------------------------------------------------------------------


@pytest.mark.parametrize("emulate", ["true", "false"])
def test_mysql_emulated_and_native_prepares_store_the_same_jobs(
    php: str, mysql_db_url: str, tmp_path: Path, emulate: str
) -> None:
    run_php = Php(php, mysql_db_url, tmp_path)
    [mode, plain, delayed, unique, duplicate] = run_php(
        f"""$pdo->setAttribute(PDO::ATTR_EMULATE_PREPARES, {emulate});
        out($pdo->getAttribute(PDO::ATTR_EMULATE_PREPARES));
        out(Queue::enqueue($pdo, 'h', ['n' => 1], ['priority' => 3, 'limit_key' => 'a']));
        out(Queue::enqueue($pdo, 'h', ['n' => 2], ['delay' => 2.5, 'max_attempts' => 4]));
        out(Queue::enqueue($pdo, 'h', ['n' => 3], ['unique_key' => 'u', 'queue' => 'q']));
        out(Queue::enqueue($pdo, 'h', ['n' => 4], ['unique_key' => 'u']));"""
    )
    assert bool(mode) is (emulate == "true")
    assert unique == duplicate
    stored = jobs(mysql_db_url)
    assert sorted(stored) == sorted([plain, delayed, unique])
    assert (stored[plain]["priority"], stored[plain]["limit_key"]) == (3, "a")
    assert stored[delayed]["status"] == "scheduled" and stored[delayed]["max_attempts"] == 4
    assert close(stored[delayed]["run_at_s"] - stored[delayed]["enqueued_at_s"], 2.5)
    assert (stored[unique]["queue"], json.loads(stored[unique]["payload"])) == ("q", {"n": 3})


@pytest.mark.parametrize("emulate", ["true", "false"])
def test_mysql_a_job_over_max_allowed_packet_is_refused_and_the_connection_lives(
    php: str, mysql_db_url: str, tmp_path: Path, emulate: str
) -> None:
    """The server would drop the connection mid-statement ("gone away"); the client refuses
    first. Quotes are escaped on the wire only with emulated prepares: a payload of
    quotes 0.6 times the limit long is refused there and stored with native prepares."""
    run_php = Php(php, mysql_db_url, tmp_path)
    limit = int(sql(mysql_db_url, "SELECT @@GLOBAL.max_allowed_packet")[0][0])
    quotes = int(limit * 0.3)  # JSON doubles them (\"), emulated SQL quoting doubles again
    [large, quoted, small, alive, near] = run_php(
        f"""$pdo->setAttribute(PDO::ATTR_EMULATE_PREPARES, {emulate});
        out(attempt(fn () => Queue::enqueue($pdo, 'h', ['blob' => str_repeat('x', {limit + 1024})])));
        out(attempt(fn () => Queue::enqueue($pdo, 'h', ['q' => str_repeat('"', {quotes})])));
        out(Queue::enqueue($pdo, 'h', ['n' => 1]));
        out((int) $pdo->query('SELECT 1')->fetchColumn());
        out(Queue::enqueue($pdo, 'h', ['blob' => str_repeat('x', {int(limit * 0.9)})]));"""
    )
    assert large["error"] == "InvalidArgumentException"
    assert "max_allowed_packet" in large["message"] and "store it elsewhere" in large["message"]
    if emulate == "true":
        assert quoted["error"] == "InvalidArgumentException", quoted
        assert "max_allowed_packet" in quoted["message"]
        assert sorted(jobs(mysql_db_url)) == [small, near]
    else:
        assert isinstance(quoted.get("id"), int), quoted
        assert sorted(jobs(mysql_db_url)) == sorted([quoted["id"], small, near])
    assert alive == 1
    [[length]] = sql(mysql_db_url, "SELECT LENGTH(payload) FROM forkq_jobs WHERE id = ?", (near,))
    assert length > limit * 0.9  # one just under the limit is stored, not refused
