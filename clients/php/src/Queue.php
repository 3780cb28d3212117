<?php

declare(strict_types=1);

namespace Forkq;

use DateTimeInterface;
use InvalidArgumentException;
use JsonException;
use PDO;
use Throwable;
use WeakMap;

/**
 * The PHP producer of forkq: one INSERT into forkq_jobs on the caller's own PDO.
 *
 * It writes what supervisor/queue.py writes (README.md, "Enqueueing from any language:
 * the data contract"), so the Python daemon cannot tell a job enqueued here from one
 * enqueued in Python. It never begins, commits or rolls back: inside the caller's open
 * transaction the job exists if and only if the caller commits; outside one the INSERT
 * commits on its own.
 */
final class Queue
{
    /** The options enqueue() takes; any other key is an error, never ignored. */
    public const OPTIONS = [
        'queue', 'delay', 'run_at', 'priority', 'unique_key', 'limit_key', 'group_key', 'max_attempts',
        'tags', 'unique_for', 'unique_while', 'on_conflict', 'debounce_max',
    ];

    /** A job due later than this (microseconds) is stored 'scheduled' (SCHEDULE_AHEAD in Python). */
    private const AHEAD_US = 2000000;

    /** The last second a MySQL/MariaDB TIMESTAMP holds (2038-01-19 03:14:07 UTC). */
    private const MYSQL_LAST_EPOCH = 2147483647;

    /** 3000-01-01 UTC: the daemon ends a later SQLite run_at dead (a raw INSERT's milliseconds). */
    private const SQLITE_FIRST_UNTIMED = 32503680000;

    /** SQLite's default SQLITE_LIMIT_LENGTH, in bytes: a longer value is refused. */
    private const SQLITE_MAX_BYTES = 1000000000;

    /** Statements shorter than this fit any server's max_allowed_packet (MIN_PACKET in Python). */
    private const MYSQL_MIN_PACKET = 1024;

    // The statements of supervisor/store/mysql.sql (insert_job, insert_job_at,
    // insert_job_unique) with limit_key. `status` reads the run_at set before it in the
    // same row: MySQL and MariaDB evaluate the VALUES list left to right.
    private const MYSQL_NOW = 'INSERT INTO forkq_jobs (queue, handler, payload, priority, max_attempts, limit_key)'
        . ' VALUES (:queue, :handler, :payload, :priority, :max_attempts, :limit_key)';
    private const MYSQL_AT = 'INSERT INTO forkq_jobs'
        . ' (queue, handler, payload, priority, run_at, status, max_attempts, limit_key, unique_key)'
        . ' VALUES (:queue, :handler, :payload, :priority,'
        . ' COALESCE(FROM_UNIXTIME(CAST(:run_at AS DECIMAL(17,6))), NOW(6) + INTERVAL :delay_us MICROSECOND),'
        . ' IF(run_at > NOW(6) + INTERVAL ' . self::AHEAD_US . ' MICROSECOND, \'scheduled\', \'ready\'),'
        . ' :max_attempts, :limit_key, :unique_key)';
    // insert_job_unique (schema 10): every column named; a conflict changes the job holding
    // the key (duplicates + 1, so rowCount() is 2), and replaces or debounces it while it
    // waits. Each placeholder once: native prepares take a name only once.
    private const WAITING = "status IN ('scheduled', 'ready', 'waiting')";
    private const MYSQL_UNIQUE = 'INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status,'
        . ' max_attempts, limit_key, group_key, tags, unique_key, unique_for, unique_while)'
        . ' VALUES (:queue, :handler, :payload, :priority,'
        . ' COALESCE(FROM_UNIXTIME(CAST(:run_at AS DECIMAL(17,6))), NOW(6) + INTERVAL :delay_us MICROSECOND),'
        . ' IF(run_at > NOW(6) + INTERVAL ' . self::AHEAD_US . ' MICROSECOND, \'scheduled\', \'ready\'),'
        . ' :max_attempts, :limit_key, :group_key, :tags, :unique_key, :unique_for, :unique_while)'
        . ' ON DUPLICATE KEY UPDATE'
        . ' payload = IF(:replace AND ' . self::WAITING . ', VALUES(payload), payload),'
        . ' run_at = IF(:debounce AND ' . self::WAITING . ', GREATEST(run_at, IF(:dmax_a IS NULL, VALUES(run_at),'
        . ' LEAST(VALUES(run_at), enqueued_at + INTERVAL :dmax_b MICROSECOND))), run_at),'
        . ' status = IF(:debounce_b AND status IN (\'scheduled\', \'ready\'),'
        . ' IF(run_at > NOW(6) + INTERVAL ' . self::AHEAD_US . ' MICROSECOND, \'scheduled\', \'ready\'), status),'
        . ' duplicates = LEAST(duplicates, 2147483646) + 1, id = LAST_INSERT_ID(id)';

    // supervisor/store/sqlite.sql: times are REAL epoch seconds of this host's clock,
    // computed here as the Python store computes them from its own clock.
    private const SQLITE_INSERT = 'INSERT INTO forkq_jobs'
        . ' (queue, handler, payload, priority, run_at, status, enqueued_at, max_attempts, limit_key, unique_key)'
        . ' VALUES (:queue, :handler, :payload, :priority, CAST(:run_at AS REAL), :status, CAST(:now AS REAL),'
        . ' :max_attempts, :limit_key, :unique_key)';
    private const SQLITE_RUN_AT = 'MAX(run_at, MIN(excluded.run_at,'
        . ' COALESCE(enqueued_at + :dmax / 1000000.0, excluded.run_at)))';
    private const SQLITE_UNIQUE = 'INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status,'
        . ' enqueued_at, max_attempts, limit_key, group_key, tags, unique_key, unique_for, unique_while)'
        . ' VALUES (:queue, :handler, :payload, :priority, CAST(:run_at AS REAL), :status, CAST(:now AS REAL),'
        . ' :max_attempts, :limit_key, :group_key, :tags, :unique_key, :unique_for, :unique_while)'
        . ' ON CONFLICT (unique_key, unique_live) WHERE unique_key IS NOT NULL DO UPDATE SET'
        . ' payload = CASE WHEN :replace AND ' . self::WAITING . ' THEN excluded.payload ELSE payload END,'
        . ' run_at = CASE WHEN :debounce AND ' . self::WAITING . ' THEN ' . self::SQLITE_RUN_AT . ' ELSE run_at END,'
        . ' status = CASE WHEN NOT (:debounce AND status IN (\'scheduled\', \'ready\')) THEN status'
        . ' WHEN ' . self::SQLITE_RUN_AT . ' > CAST(:now AS REAL) + ' . self::AHEAD_US . ' / 1000000.0'
        . ' THEN \'scheduled\' ELSE \'ready\' END,'
        . ' duplicates = duplicates + 1 RETURNING id, duplicates';

    // Same-host wake-up (supervisor/wake.py): where local daemons bind their sockets.
    private const SYSTEM_RUNTIME_DIR = '/run/forkq';
    private const MAX_SOCKETS = 16;

    /** @var WeakMap<PDO, int>|null max_allowed_packet of each MySQL connection, read once */
    private static ?WeakMap $packetLimits = null;

    /** @var WeakMap<PDO, string>|null the character set of each MySQL connection, read once */
    private static ?WeakMap $charsets = null;

    /** @var WeakMap<PDO, string>|null the database identity of each connection, for the nudge */
    private static ?WeakMap $identities = null;

    private function __construct()
    {
    }

    /**
     * Add one job and return its id (the existing job's id when unique_key is taken;
     * $conflicted then says so). unique_for (seconds), unique_while (queued, active, kept)
     * and on_conflict (skip, replace, debounce with debounce_max seconds) are Python's.
     *
     * @param array<mixed>|object $payload JSON-encodable; an empty array is stored as {}
     * @param array<string, mixed> $options queue, delay, run_at, priority, unique_key,
     *     limit_key, group_key, max_attempts (null for any of them means its default)
     *
     * @throws InvalidArgumentException a bad handler, option or payload (nothing written)
     * @throws \PDOException the database refused the INSERT
     */
    public static function enqueue(
        \PDO $pdo,
        string $handler,
        array|object $payload = [],
        array $options = [],
        ?bool &$conflicted = null
    ): int {
        $conflicted = false;
        $job = self::build($handler, $payload, $options);
        $driver = $pdo->getAttribute(PDO::ATTR_DRIVER_NAME);
        if ($driver !== 'mysql' && $driver !== 'sqlite') {
            throw new InvalidArgumentException("forkq needs a MySQL/MariaDB or SQLite PDO, not '$driver'");
        }
        $mode = $pdo->getAttribute(PDO::ATTR_ERRMODE);
        $pdo->setAttribute(PDO::ATTR_ERRMODE, PDO::ERRMODE_EXCEPTION);
        try {
            if ($driver === 'mysql') {
                self::checkCharset($pdo, $job);
            }
            if ($job['unique_key'] !== null) {
                [$id, $conflicted] = self::insertUnique($pdo, $driver, $job);
            } else {
                $id = $driver === 'mysql' ? self::insertMysql($pdo, $job) : self::insertSqlite($pdo, $job);
            }
            self::nudge($pdo, $driver, $job);
            return $id;
        } finally {
            $pdo->setAttribute(PDO::ATTR_ERRMODE, $mode);
        }
    }

    /**
     * Check and encode one job, as build_job() in supervisor/queue.py does.
     *
     * @param array<mixed>|object $payload
     * @param array<mixed> $options
     * @return array{queue: string, handler: string, payload: string, priority: int,
     *     delay: int|float, run_at: ?string, unique_key: ?string, limit_key: ?string,
     *     group_key: ?string,
     *     max_attempts: ?int, tags: ?string, unique_for: ?int, unique_while: ?string,
     *     on_conflict: string, debounce_max_us: ?int}
     */
    private static function build(string $handler, array|object $payload, array $options): array
    {
        $unknown = array_diff(array_map('strval', array_keys($options)), self::OPTIONS);
        if ($unknown !== []) {
            throw new InvalidArgumentException(
                'unknown enqueue option(s): ' . implode(', ', $unknown) . '; known: ' . implode(', ', self::OPTIONS)
            );
        }
        $option = static fn (string $name): mixed => $options[$name] ?? null;
        if (self::length($handler) === null || $handler === '' || self::length($handler) > 191) {
            throw new InvalidArgumentException('handler must be a UTF-8 name of 1 to 191 characters');
        }
        $queue = $option('queue') ?? '';
        if (!is_string($queue) || self::length($queue) === null || self::length($queue) > 64) {
            throw new InvalidArgumentException('queue must be a UTF-8 name of at most 64 characters');
        }
        $delay = $option('delay') ?? 0;
        if (!(is_int($delay) || is_float($delay)) || !is_finite((float) $delay) || $delay < 0 || $delay > 9e12) {
            throw new InvalidArgumentException('delay must be a finite number of seconds >= 0');
        }
        $priority = $option('priority') ?? 0;
        if (!is_int($priority) || $priority < -2147483648 || $priority > 2147483647) {
            throw new InvalidArgumentException('priority must be a 32-bit integer');
        }
        $maxAttempts = $option('max_attempts');
        if ($maxAttempts !== null && (!is_int($maxAttempts) || $maxAttempts < 1 || $maxAttempts > 2147483647)) {
            throw new InvalidArgumentException('max_attempts must be an integer from 1 to 2147483647');
        }
        return [
            'queue' => $queue === '' ? 'default' : $queue,
            'handler' => $handler,
            'payload' => self::encode($payload),
            'priority' => $priority,
            'delay' => $delay,
            'run_at' => self::epoch($option('run_at')),
            'unique_key' => self::key($option('unique_key'), 'unique_key'),
            'limit_key' => self::key($option('limit_key'), 'limit_key'),
            'group_key' => self::key($option('group_key'), 'group_key'),
            'max_attempts' => $maxAttempts,
            'tags' => self::tags($option('tags')),
        ] + self::unique($option, $options['unique_key'] ?? null);
    }

    /**
     * The uniqueness window, scope and conflict action (supervisor/unique.py).
     *
     * @return array{unique_for: ?int, unique_while: ?string, on_conflict: string, debounce_max_us: ?int}
     */
    private static function unique(\Closure $option, mixed $key): array
    {
        $for = $option('unique_for');
        $while = $option('unique_while');
        $onConflict = $option('on_conflict') ?? 'skip';
        $max = $option('debounce_max');
        if (($for !== null || $while !== null || $onConflict !== 'skip' || $max !== null) && $key === null) {
            throw new InvalidArgumentException('unique_for, unique_while and on_conflict need a unique_key');
        }
        if ($for !== null && (!is_int($for) || $for < 1 || $for > 2147483647)) {
            throw new InvalidArgumentException('unique_for must be a whole number of seconds, 1 to 2147483647');
        }
        if ($while !== null && !in_array($while, ['queued', 'active', 'kept'], true)) {
            throw new InvalidArgumentException('unique_while must be one of queued, active, kept');
        }
        if (!in_array($onConflict, ['skip', 'replace', 'debounce'], true)) {
            throw new InvalidArgumentException('on_conflict must be one of skip, replace, debounce');
        }
        $seconds = (is_int($max) || is_float($max)) && !is_nan((float) $max) && $max > 0 && $max <= 9e12;
        if ($max !== null && ($onConflict !== 'debounce' || !$seconds)) {
            throw new InvalidArgumentException('debounce_max must be seconds > 0, with on_conflict "debounce"');
        }
        return [
            'unique_for' => $for,
            'unique_while' => $while,
            'on_conflict' => $onConflict,
            'debounce_max_us' => $max === null ? null : (int) round($max * 1000000),
        ];
    }

    /**
     * A job with a unique_key: insert_job_unique of supervisor/store/sql/ (schema 10).
     *
     * @param array<string, mixed> $job
     * @return array{0: int, 1: bool} its id (the existing job's on a conflict), and whether it conflicted
     */
    private static function insertUnique(PDO $pdo, string $driver, array $job): array
    {
        $values = [
            'queue' => $job['queue'],
            'handler' => $job['handler'],
            'payload' => $job['payload'],
            'priority' => $job['priority'],
            'max_attempts' => $job['max_attempts'],
            'limit_key' => $job['limit_key'],
            'group_key' => $job['group_key'],
            'tags' => $job['tags'],
            'unique_key' => $job['unique_key'],
            'unique_for' => $job['unique_for'],
            'unique_while' => $job['unique_while'],
            'replace' => (int) ($job['on_conflict'] !== 'skip'),
            'debounce' => (int) ($job['on_conflict'] === 'debounce'),
        ];
        if ($driver === 'mysql') {
            self::checkMysqlTime($pdo, $job);
            $values += [
                'run_at' => $job['run_at'],
                'delay_us' => (int) round($job['delay'] * 1000000),
                'dmax_a' => $job['debounce_max_us'],
                'dmax_b' => $job['debounce_max_us'],
                'debounce_b' => $values['debounce'],
            ];
            self::checkPacket($pdo, self::MYSQL_UNIQUE, $values);
            $statement = self::execute($pdo, self::MYSQL_UNIQUE, $values);
            [$id, $conflicted] = [(int) $pdo->lastInsertId(), $statement->rowCount() > 1];
        } else {
            $now = microtime(true);
            $runAt = self::sqliteRunAt($job, $now);
            $values += [
                'run_at' => $runAt,
                'status' => (float) $runAt > $now + self::AHEAD_US / 1000000 ? 'scheduled' : 'ready',
                'now' => sprintf('%.6F', $now),
                'dmax' => $job['debounce_max_us'],
            ];
            // RETURNING: the statement is finished only once its row has been read.
            $statement = self::execute($pdo, self::SQLITE_UNIQUE, $values);
            $row = $statement->fetchAll(PDO::FETCH_NUM)[0];
            $statement->closeCursor();
            [$id, $conflicted] = [(int) $row[0], (int) $row[1] > 0];
        }
        if (!$conflicted) {
            self::joinRound($pdo, $driver === 'mysql' ? 'INSERT IGNORE' : 'INSERT OR IGNORE', $job);
        }
        return [$id, $conflicted];
    }

    /** Tags as the JSON text of forkq_jobs.tags (schema 9): up to 20 names of 1 to 64 characters. */
    private static function tags(mixed $tags): ?string
    {
        if ($tags === null || $tags === []) {
            return null;
        }
        if (!is_array($tags) || !array_is_list($tags) || count($tags) > 20) {
            throw new InvalidArgumentException('tags must be a list of up to 20 names');
        }
        foreach ($tags as $tag) {
            if (!is_string($tag) || $tag === '' || self::length($tag) === null || self::length($tag) > 64) {
                throw new InvalidArgumentException('tags must be UTF-8 names of 1 to 64 characters');
            }
        }
        return json_encode(array_values(array_unique($tags)), JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES);
    }

    /** A job with tags names the column (schema 9); others do not, so older schemas take them. */
    private static function tagged(string $sql): string
    {
        return str_replace(
            ['limit_key, unique_key)', ':limit_key, :unique_key)'],
            ['limit_key, unique_key, tags)', ':limit_key, :unique_key, :tags)'],
            $sql
        );
    }

    /** The number of characters of a UTF-8 string; null when it is not valid UTF-8. */
    private static function length(string $text): ?int
    {
        $count = preg_match_all('/./su', $text);
        return $count === false ? null : $count;
    }

    private static function key(mixed $value, string $name): ?string
    {
        if ($value === null) {
            return null;
        }
        if (!is_string($value) || $value === '' || self::length($value) === null || self::length($value) > 191) {
            throw new InvalidArgumentException("$name must be a UTF-8 string of 1 to 191 characters");
        }
        if (str_ends_with($value, ' ')) {
            // MySQL's collation pads with spaces: 'a ' and 'a' would be one key there.
            throw new InvalidArgumentException("$name must not end with a space (MySQL compares it without)");
        }
        if ($name === 'limit_key' && str_contains($value, "\0")) {
            // No bucket can hold it (SQLite's JSON ends a string there): forkq refuses it too.
            throw new InvalidArgumentException('limit_key must not hold a NUL character');
        }
        return $value;
    }

    /** An absolute run_at as epoch seconds with microseconds ("1767225600.250000"). */
    private static function epoch(mixed $runAt): ?string
    {
        if ($runAt === null) {
            return null;
        }
        if (!$runAt instanceof DateTimeInterface) {
            throw new InvalidArgumentException('run_at must be a DateTimeInterface');
        }
        if ($runAt->getTimestamp() < 1) {
            throw new InvalidArgumentException('run_at must be after 1970-01-01 00:00:01 UTC');
        }
        return $runAt->format('U.u');
    }

    /**
     * JSON text that decodes to what the caller gave; ASCII only (\u escapes), so no
     * connection character set can garble it on the way in.
     *
     * @param array<mixed>|object $payload
     */
    private static function encode(array|object $payload): string
    {
        if ($payload === []) {
            return '{}'; // the default: an empty object, as Python stores None
        }
        try {
            return json_encode($payload, JSON_THROW_ON_ERROR | JSON_UNESCAPED_SLASHES | JSON_PRESERVE_ZERO_FRACTION);
        } catch (JsonException $exc) {
            throw new InvalidArgumentException('payload must be JSON-encodable: ' . $exc->getMessage(), 0, $exc);
        }
    }

    /**
     * Names and keys go as text (the payload is JSON, ASCII only): on a connection that is
     * not UTF-8 (e.g. charset=latin1) MySQL would convert their bytes into other letters,
     * and a key would no longer match the same key enqueued from Python.
     *
     * @param array<string, mixed> $job
     */
    private static function checkCharset(PDO $pdo, array $job): void
    {
        $texts = [$job['queue'], $job['handler'], $job['unique_key'], $job['limit_key'], $job['group_key']];
        if (preg_match('/[^\x00-\x7F]/', implode('', array_filter([...$texts, $job['tags']], 'is_string'))) !== 1) {
            return;
        }
        self::$charsets ??= new WeakMap();
        $charset = self::$charsets[$pdo] ??= (string) $pdo->query('SELECT @@character_set_client')->fetchColumn();
        if (!in_array($charset, ['utf8mb4', 'utf8mb3', 'utf8'], true)) {
            throw new InvalidArgumentException(
                "the PDO's connection character set is $charset: open it with charset=utf8mb4"
                . ' (names and keys that are not ASCII would be stored as other letters)'
            );
        }
    }

    /** @param array<string, mixed> $job */
    private static function insertMysql(PDO $pdo, array $job): int
    {
        self::checkMysqlTime($pdo, $job);
        $values = [
            'queue' => $job['queue'],
            'handler' => $job['handler'],
            'payload' => $job['payload'],
            'priority' => $job['priority'],
            'max_attempts' => $job['max_attempts'],
            'limit_key' => $job['limit_key'],
        ];
        $now = $job['unique_key'] === null && $job['run_at'] === null && (float) $job['delay'] === 0.0;
        if ($now && $job['tags'] === null) {
            $sql = self::MYSQL_NOW; // run now: run_at and status take their defaults
        } else {
            $at = $job['tags'] === null ? self::MYSQL_AT : self::tagged(self::MYSQL_AT);
            $sql = $at; // (a job with a unique_key: insertUnique)
            $values += [
                'run_at' => $job['run_at'],
                'delay_us' => (int) round($job['delay'] * 1000000),
                'unique_key' => $job['unique_key'],
            ];
            if ($job['tags'] !== null) {
                $values['tags'] = $job['tags'];
            }
        }
        [$sql, $values] = self::grouped($sql, $values, $job);
        self::checkPacket($pdo, $sql, $values);
        self::execute($pdo, $sql, $values);
        $id = (int) $pdo->lastInsertId();
        self::joinRound($pdo, 'INSERT IGNORE', $job);
        return $id;
    }

    /**
     * A job with a group_key: its tenant joins its queue's round of a fair pool at once
     * (join_round in supervisor/store/sql/).
     *
     * @param array<string, mixed> $job
     */
    private static function joinRound(PDO $pdo, string $insert, array $job): void
    {
        if ($job['group_key'] !== null) {
            self::execute($pdo, $insert . ' INTO forkq_tenants (queue, tenant) VALUES (:queue, :tenant)', [
                'queue' => $job['queue'],
                'tenant' => $job['group_key'],
            ]);
        }
    }

    /**
     * The INSERT with group_key named beside limit_key, for a job that has one (its tenant
     * in a fair pool, schema version 8); other jobs never name the column.
     *
     * @param array<string, mixed> $values
     * @param array<string, mixed> $job
     * @return array{0: string, 1: array<string, mixed>}
     */
    private static function grouped(string $sql, array $values, array $job): array
    {
        if ($job['group_key'] === null) {
            return [$sql, $values];
        }
        $sql = str_replace([' limit_key', ':limit_key'], [' limit_key, group_key', ':limit_key, :group_key'], $sql);
        return [$sql, $values + ['group_key' => $job['group_key']]];
    }

    /**
     * Refuse a job whose run_at (given, or the database's now + delay) is past the last
     * second a TIMESTAMP holds: strict servers refuse the INSERT (1292, or 1441 for a delay
     * that overflows their date arithmetic), and with sql_mode = '' the row would be stored
     * to run in 1970, at once. A delay is judged on the database's clock (the INSERT counts
     * from it), read only when this host's clock puts the end within a day of the limit.
     *
     * @param array<string, mixed> $job
     */
    private static function checkMysqlTime(PDO $pdo, array $job): void
    {
        if ($job['run_at'] !== null) {
            if ((float) $job['run_at'] >= self::MYSQL_LAST_EPOCH + 1) {
                throw new InvalidArgumentException('run_at must be before 2038-01-19 03:14:08 UTC on MySQL/MariaDB');
            }
            return;
        }
        $delay = (float) $job['delay'];
        $now = microtime(true);
        if ($delay <= 0 || $now + $delay < self::MYSQL_LAST_EPOCH + 1 - 86400) {
            return;
        }
        $now = (float) $pdo->query('SELECT UNIX_TIMESTAMP(NOW(6))')->fetchColumn();
        if ($now + $delay >= self::MYSQL_LAST_EPOCH + 1) {
            throw new InvalidArgumentException(sprintf(
                'delay must end before 2038-01-19 03:14:08 UTC on MySQL/MariaDB (the latest TIMESTAMP);'
                . ' %.0f seconds from now is %s',
                $delay,
                $delay < 1e11 ? gmdate('Y-m-d H:i:s', (int) ($now + $delay)) . ' UTC' : 'far beyond it'
            ));
        }
    }

    /**
     * The job's run_at in epoch seconds as SQLite keeps it; refused from the year 3000 on,
     * where the daemon takes a run_at for milliseconds and ends its job dead.
     *
     * @param array<string, mixed> $job
     */
    private static function sqliteRunAt(array $job, float $now): string
    {
        $runAt = $job['run_at'] ?? sprintf('%.6F', $now + $job['delay']);
        if ((float) $runAt >= self::SQLITE_FIRST_UNTIMED) {
            throw new InvalidArgumentException('run_at and delay must fall before 3000-01-01 00:00:00 UTC on SQLite');
        }
        return (string) $runAt;
    }

    /** @param array<string, mixed> $job */
    private static function insertSqlite(PDO $pdo, array $job): int
    {
        if (strlen($job['payload']) > self::SQLITE_MAX_BYTES) {
            throw new InvalidArgumentException(sprintf(
                'the payload is %.1f MB, more than SQLite stores in one value (%.1f MB)',
                strlen($job['payload']) / 1048576,
                self::SQLITE_MAX_BYTES / 1048576
            ));
        }
        $now = microtime(true);
        $runAt = self::sqliteRunAt($job, $now);
        $values = [
            'queue' => $job['queue'],
            'handler' => $job['handler'],
            'payload' => $job['payload'],
            'priority' => $job['priority'],
            'run_at' => $runAt,
            'status' => (float) $runAt > $now + self::AHEAD_US / 1000000 ? 'scheduled' : 'ready',
            'now' => sprintf('%.6F', $now),
            'max_attempts' => $job['max_attempts'],
            'limit_key' => $job['limit_key'],
            'unique_key' => $job['unique_key'],
        ];
        $insert = self::SQLITE_INSERT;
        if ($job['tags'] !== null) {
            $insert = self::tagged($insert);
            $values['tags'] = $job['tags'];
        }
        [$insert, $values] = self::grouped($insert, $values, $job);
        self::execute($pdo, $insert, $values); // (a job with a unique_key: insertUnique)
        $id = (int) $pdo->lastInsertId();
        self::joinRound($pdo, 'INSERT OR IGNORE', $job);
        return $id;
    }

    /** @param array<string, mixed> $values */
    private static function execute(PDO $pdo, string $sql, array $values): \PDOStatement
    {
        $statement = $pdo->prepare($sql);
        foreach ($values as $name => $value) {
            $type = match (true) {
                $value === null => PDO::PARAM_NULL,
                is_int($value) => PDO::PARAM_INT,
                default => PDO::PARAM_STR,
            };
            $statement->bindValue(':' . $name, $value, $type);
        }
        $statement->execute();
        return $statement;
    }

    /**
     * Refuse a statement longer than the session's max_allowed_packet with a clear
     * error: the server would close the connection mid-write ("server has gone away").
     * Emulated prepares (pdo_mysql's default) send the values quoted and escaped inside
     * the SQL text; native ones send them as they are.
     *
     * @param array<string, mixed> $values
     */
    private static function checkPacket(PDO $pdo, string $sql, array $values): void
    {
        $escaped = (bool) $pdo->getAttribute(PDO::ATTR_EMULATE_PREPARES);
        $size = strlen($sql) + 1;
        foreach ($values as $name => $value) {
            if (!is_string($value)) {
                $size += 24;
            } elseif (!$escaped) {
                $size += strlen($value) + 9; // and its length
            } elseif ($name === 'payload') {
                // Quoted, each quote and backslash escaped (ASCII JSON: nothing else is).
                $size += strlen($value) + 2 + substr_count($value, '"') + substr_count($value, "'")
                    + substr_count($value, '\\');
            } else {
                $size += 2 * strlen($value) + 2; // at their worst
            }
        }
        if ($size <= self::MYSQL_MIN_PACKET) {
            return;
        }
        self::$packetLimits ??= new WeakMap();
        $limit = self::$packetLimits[$pdo] ??= (int) $pdo->query('SELECT @@SESSION.max_allowed_packet')->fetchColumn();
        if ($size > $limit) {
            throw new InvalidArgumentException(sprintf(
                'the job is %.1f MB to send, more than the server\'s max_allowed_packet (%.1f MB):'
                . ' keep large data out of the payload (store it elsewhere and enqueue a reference),'
                . ' or raise max_allowed_packet',
                $size / 1048576,
                $limit / 1048576
            ));
        }
    }

    /**
     * Tell the daemons on this host that serve this database that the job's queue has a
     * job now (supervisor/wake.py), so an idle child takes it without waiting for its
     * poll. Best effort: it never throws, never blocks, and costs nothing where no
     * daemon's socket directory exists; a lost nudge leaves the job to the poll.
     *
     * @param array<string, mixed> $job
     */
    private static function nudge(PDO $pdo, string $driver, array $job): void
    {
        $due = $job['run_at'] === null ? $job['delay'] <= 0 : (float) $job['run_at'] <= microtime(true);
        if (!$due || !function_exists('socket_create')) {
            return;
        }
        set_error_handler(static fn (): bool => true); // the caller's handler never sees ours
        try {
            $wake = strtolower(trim((string) getenv('FORKQ_WAKE')));
            if (in_array($wake, ['0', 'false', 'no', 'off'], true)) {
                return;
            }
            $bases = self::runtimeDirs();
            if ($bases === []) {
                return;
            }
            self::$identities ??= new WeakMap();
            $identity = self::$identities[$pdo] ??= self::identity($pdo, $driver);
            if ($identity === '') {
                return;
            }
            self::send($bases, substr(hash('sha256', $identity), 0, 16), $job['queue'] . "\n");
        } catch (Throwable) {
            return; // a nudge must never fail an enqueue
        } finally {
            restore_error_handler();
        }
    }

    /** @return list<array{string, bool}> existing runtime dirs, each with "must be mine" */
    private static function runtimeDirs(): array
    {
        $override = (string) getenv('FORKQ_RUNTIME_DIR');
        $candidates = $override !== '' ? [[$override, false]] : [[self::SYSTEM_RUNTIME_DIR, false]];
        if ($override === '' && function_exists('posix_getuid')) {
            $candidates[] = [rtrim(sys_get_temp_dir(), '/') . '/forkq-' . posix_getuid(), true];
        }
        return array_values(array_filter($candidates, static fn (array $c): bool => is_dir($c[0])));
    }

    /** What names this database on this host (wake.py database_identity); '' if unknown. */
    private static function identity(PDO $pdo, string $driver): string
    {
        if ($driver === 'sqlite') {
            foreach ($pdo->query('PRAGMA database_list')->fetchAll(PDO::FETCH_ASSOC) as $row) {
                if ($row['name'] === 'main' && $row['file'] !== '') {
                    return 'sqlite:' . (realpath($row['file']) ?: $row['file']);
                }
            }
            return '';
        }
        [$database, $port] = $pdo->query('SELECT DATABASE(), @@port')->fetch(PDO::FETCH_NUM);
        $status = (string) $pdo->getAttribute(PDO::ATTR_CONNECTION_STATUS);
        $host = strtolower(explode(' via ', $status)[0]);
        if ($database === null || $host === '') {
            return '';
        }
        if (str_contains($status, 'UNIX socket') || in_array($host, ['127.0.0.1', '::1', 'localhost'], true)) {
            return "mysql:local/$database";
        }
        return "mysql:$host:$port/$database";
    }

    /** @param list<array{string, bool}> $bases */
    private static function send(array $bases, string $key, string $datagram): void
    {
        $paths = [];
        foreach ($bases as [$base, $private]) {
            $dir = "$base/$key";
            if ($private && fileowner($dir) !== posix_getuid()) {
                continue;
            }
            $names = preg_grep('/\.sock$/', scandir($dir) ?: []);
            foreach (array_slice($names, 0, self::MAX_SOCKETS) as $name) {
                $paths[] = "$dir/$name";
            }
        }
        if ($paths === []) {
            return;
        }
        $socket = socket_create(AF_UNIX, SOCK_DGRAM, 0);
        if ($socket === false) {
            return;
        }
        socket_set_nonblock($socket);
        foreach ($paths as $path) {
            socket_sendto($socket, $datagram, strlen($datagram), 0, $path);
        }
        socket_close($socket);
    }
}
