<?php

/**
 * An example forkq command handler in PHP (README.md, "Handlers in any language").
 *
 * forkq runs it once per job, for example with
 *
 *     [commands."report.send"]
 *     argv = ["php", "/srv/app/handlers/php/send_report.php"]
 *     queue = "reports"
 *     timeout = 120
 *     env = { REPORT_OUTBOX = "/var/spool/reports" }
 *
 * and enqueued from PHP with
 *
 *     Forkq\Queue::enqueue($pdo, 'report.send', ['report' => 'sales', 'to' => 'boss@example.com',
 *         'day' => '2026-01-31'], ['queue' => 'reports']);
 *
 * The contract: the job's payload (JSON) on stdin; FORKQ_JOB_ID, FORKQ_QUEUE,
 * FORKQ_HANDLER and FORKQ_ATTEMPT in the environment; exit 0 when done, 65
 * (EX_DATAERR) when the job can never succeed (forkq marks it dead at once), any other
 * status when this attempt failed (forkq retries it with backoff while attempts are
 * left). What goes to stderr ends up in the daemon's log, and its tail in the job's
 * last_error: write diagnostics there, one line each.
 *
 * "Sending" here is writing the report into REPORT_OUTBOX, a stand-in for the SMTP or
 * HTTP call a real handler makes; what matters is which failures are permanent.
 */

declare(strict_types=1);

// A script declares its helpers and runs them (PSR-1 would keep the two in two files).
// phpcs:disable PSR1.Files.SideEffects

const EXIT_DONE = 0;
const EXIT_FAILED = 1;    // retried with backoff while attempts are left
const EXIT_DATAERR = 65;  // permanent: forkq marks the job dead, no retry

const REPORTS = ['sales', 'stock', 'signups'];

function say(string $message): void
{
    $job = getenv('FORKQ_JOB_ID') ?: '?';
    $attempt = getenv('FORKQ_ATTEMPT') ?: '?';
    fwrite(STDERR, "send_report job=$job attempt=$attempt: $message\n");
}

/**
 * The payload, checked: a bad one is a permanent failure (retrying cannot fix it).
 *
 * @return array{report: string, to: string, day: string}
 */
function readPayload(string $json): array
{
    try {
        $payload = json_decode($json, true, 32, JSON_THROW_ON_ERROR);
    } catch (JsonException $exc) {
        throw new DomainException('the payload is not JSON: ' . $exc->getMessage());
    }
    if (!is_array($payload)) {
        throw new DomainException('the payload must be a JSON object');
    }
    $report = $payload['report'] ?? null;
    if (!is_string($report) || !in_array($report, REPORTS, true)) {
        throw new DomainException('report must be one of ' . implode(', ', REPORTS));
    }
    $to = $payload['to'] ?? null;
    if (!is_string($to) || filter_var($to, FILTER_VALIDATE_EMAIL) === false) {
        throw new DomainException('to must be an e-mail address');
    }
    $day = $payload['day'] ?? null;
    if (!is_string($day) || DateTimeImmutable::createFromFormat('!Y-m-d', $day) === false) {
        throw new DomainException('day must be a date, YYYY-MM-DD');
    }
    return ['report' => $report, 'to' => $to, 'day' => $day];
}

/** Deliver the report; a RuntimeException is a temporary failure (worth a retry). */
function send(array $payload): string
{
    $outbox = getenv('REPORT_OUTBOX');
    if ($outbox === false || $outbox === '' || !is_dir($outbox) || !is_writable($outbox)) {
        throw new RuntimeException('REPORT_OUTBOX is not a writable directory: ' . var_export($outbox, true));
    }
    $job = preg_replace('/\D/', '', (string) getenv('FORKQ_JOB_ID')) ?: 'unknown';
    $body = sprintf(
        "To: %s\nSubject: %s report for %s\n\n(the report)\n",
        $payload['to'],
        $payload['report'],
        $payload['day']
    );
    $path = "$outbox/report-$job.txt";
    // One attempt may have written it already before dying: writing it again is harmless.
    if (file_put_contents("$path.tmp", $body) === false || !rename("$path.tmp", $path)) {
        throw new RuntimeException("could not write $path");
    }
    return $path;
}

function main(): int
{
    $input = stream_get_contents(STDIN);
    if ($input === false) {
        say('could not read the payload from stdin');
        return EXIT_FAILED;
    }
    try {
        $payload = readPayload($input);
    } catch (DomainException $exc) {
        say('bad payload: ' . $exc->getMessage());
        return EXIT_DATAERR;
    }
    try {
        $path = send($payload);
    } catch (Throwable $exc) {
        say('not sent, will be retried: ' . $exc->getMessage());
        return EXIT_FAILED;
    }
    say("sent the {$payload['report']} report for {$payload['day']} to {$payload['to']} ($path)");
    return EXIT_DONE;
}

exit(main());
