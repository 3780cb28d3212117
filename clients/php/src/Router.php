<?php

declare(strict_types=1);

namespace Forkq;

use InvalidArgumentException;
use PDO;

/**
 * Queues spread over several databases (forkq.toml's `[databases.NAME] queues = [...]`):
 * a PDO per database, and enqueue() writes each job into its queue's database with
 * Queue::enqueue, so inside that PDO's open transaction as ever. Every queue not listed
 * lives in the home database, named 'default' (`[database]`). Without Composer's autoloader,
 * require Queue.php and then Router.php.
 *
 *     $router = new Router(
 *         ['default' => $appPdo, 'reports' => $reportsPdo],
 *         ['reports' => ['reports', 'pdf']],   // the same lists as the TOML's
 *     );
 *     $id = $router->enqueue('report.build', ['month' => '2026-05'], ['queue' => 'pdf']);
 *     $router->ref('pdf', $id);               // "reports:42": ids are per database
 */
final class Router
{
    /** The name of `[database]`, as HOME_DATABASE in supervisor/config/model.py. */
    public const HOME = 'default';

    /** @var array<string, PDO> */
    private array $pdos;

    /** @var array<string, string> the database of each listed queue */
    private array $databaseOf = [];

    /**
     * @param array<string, PDO> $pdos a PDO per database name, 'default' among them
     * @param array<string, list<string>> $queues the queues of each other database
     *
     * @throws InvalidArgumentException a missing PDO, or a queue in two databases
     */
    public function __construct(array $pdos, array $queues = [])
    {
        foreach ($pdos as $name => $pdo) {
            if (!$pdo instanceof PDO) {
                throw new InvalidArgumentException("the database '$name' needs a PDO");
            }
        }
        if (!isset($pdos[self::HOME])) {
            throw new InvalidArgumentException("no PDO for the home database '" . self::HOME . "'");
        }
        foreach ($queues as $name => $names) {
            $name = (string) $name;
            if ($name === self::HOME) {
                throw new InvalidArgumentException(
                    "queues for '$name': the home database takes every queue not listed;"
                    . ' list queues only for the others'
                );
            }
            if (!isset($pdos[$name])) {
                throw new InvalidArgumentException("queues for '$name': no such database among the PDOs");
            }
            foreach ($names as $queue) {
                $other = $this->databaseOf[$queue] ?? null;
                if ($other !== null && $other !== $name) {
                    throw new InvalidArgumentException("queue '$queue' is in both '$other' and '$name'");
                }
                $this->databaseOf[$queue] = $name;
            }
        }
        $this->pdos = $pdos;
    }

    /** The name of the database holding $queue ('default' when no database lists it). */
    public function databaseOf(string $queue): string
    {
        return $this->databaseOf[$queue === '' ? 'default' : $queue] ?? self::HOME;
    }

    /** The PDO of $queue's database: begin a transaction on it to enqueue inside yours. */
    public function pdoFor(string $queue): PDO
    {
        return $this->pdos[$this->databaseOf($queue)];
    }

    /**
     * Queue::enqueue on the PDO of $options['queue'] (the queue 'default' without one).
     *
     * @param array<mixed>|object $payload
     * @param array<string, mixed> $options as Queue::enqueue
     */
    public function enqueue(
        string $handler,
        array|object $payload = [],
        array $options = [],
        ?bool &$conflicted = null
    ): int {
        $queue = $options['queue'] ?? '';
        $pdo = $this->pdoFor(is_string($queue) ? $queue : '');
        return Queue::enqueue($pdo, $handler, $payload, $options, $conflicted);
    }

    /** How forkq names the job $id of $queue: "42" at home, "reports:42" elsewhere. */
    public function ref(string $queue, int $id): string
    {
        $database = $this->databaseOf($queue);
        return $database === self::HOME ? (string) $id : "$database:$id";
    }
}
