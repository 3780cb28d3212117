-- forkq named queries for SQLite (sqlite3, :name parameters), the same names as mysql.sql.
-- Times are REAL epoch seconds; the caller binds :now (one host, one clock). Id lists
-- are bound as one JSON array and read with json_each, so every statement stays fixed
-- text. Writes run inside BEGIN IMMEDIATE (the store opens it).

-- name: server_version
SELECT 'SQLite ' || sqlite_version() AS version;

-- name: db_now
SELECT :now AS now;

-- name: schema_version
SELECT version FROM forkq_schema WHERE id = 1;

-- name: set_schema_version
INSERT INTO forkq_schema (id, version, applied_at) VALUES (1, :version, :now)
ON CONFLICT (id) DO UPDATE SET version = excluded.version, applied_at = excluded.applied_at;

-- name: insert_job
-- A job to run now, without a unique key: a plain INSERT (the id is the cursor's lastrowid).
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, enqueued_at, max_attempts)
VALUES (:queue, :handler, :payload, :priority, :now, :now, :max_attempts);

-- name: insert_job_at
-- A delayed job (or one with a run_at), without a unique key.
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, enqueued_at, max_attempts)
VALUES (:queue, :handler, :payload, :priority, COALESCE(:run_at, :now + :delay_us / 1000000.0), :now,
        :max_attempts);

-- name: insert_job_unique
-- With a unique key: a duplicate returns the existing job's id.
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, enqueued_at, unique_key, max_attempts)
VALUES (:queue, :handler, :payload, :priority, COALESCE(:run_at, :now + :delay_us / 1000000.0), :now,
        :unique_key, :max_attempts)
ON CONFLICT (unique_key) DO UPDATE SET unique_key = excluded.unique_key
RETURNING id;

-- name: claim_select
-- The claim index is named: with a range on run_at the planner picks forkq_jobs_status
-- and sorts the whole backlog for every batch.
-- Only what a worker needs (the same columns as MySQL's claim_select).
SELECT id, handler, payload, priority, attempts, max_attempts, unique_key,
       run_at AS run_at_s, enqueued_at AS enqueued_at_s
FROM forkq_jobs INDEXED BY forkq_jobs_claim
WHERE queue = :queue AND status = 'ready' AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :limit;

-- name: claim_update
UPDATE forkq_jobs
SET status = 'running', locked_by = :owner, attempts = attempts + 1, started_at = :now,
    locked_until = :now + :lease_us / 1000000.0
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: extend_leases
UPDATE forkq_jobs SET locked_until = :now + :lease_us / 1000000.0
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running' AND locked_by = :owner;

-- name: complete_delete
DELETE FROM forkq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running' AND locked_by = :owner;

-- name: complete_keep
UPDATE forkq_jobs
SET status = 'done', finished_at = :now, locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running' AND locked_by = :owner;

-- name: complete_archive_copy
INSERT INTO forkq_jobs_archive
  (id, queue, handler, payload, status, priority, run_at, attempts, max_attempts, unique_key,
   locked_by, locked_until, last_error, enqueued_at, started_at, finished_at, archived_at)
SELECT id, queue, handler, payload, 'done', priority, run_at, attempts, max_attempts, unique_key,
       locked_by, NULL, last_error, enqueued_at, started_at, :now, :now
FROM forkq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running' AND locked_by = :owner;

-- name: fail_retry
UPDATE forkq_jobs
SET status = 'ready', run_at = :now + :delay_us / 1000000.0, last_error = :error,
    locked_by = NULL, locked_until = NULL, max_attempts = COALESCE(:max_attempts, max_attempts)
WHERE id = :id AND status = 'running' AND locked_by = :owner
  AND (:only_expired = 0 OR locked_until < :now);

-- name: fail_dead
UPDATE forkq_jobs
SET status = 'dead', finished_at = :now, last_error = :error,
    locked_by = NULL, locked_until = NULL, max_attempts = COALESCE(:max_attempts, max_attempts)
WHERE id = :id AND status = 'running' AND locked_by = :owner
  AND (:only_expired = 0 OR locked_until < :now);

-- name: release
UPDATE forkq_jobs
SET status = 'ready', attempts = MAX(attempts - :uncount, 0), locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running' AND locked_by = :owner;

-- name: held_by
SELECT * FROM forkq_jobs WHERE status = 'running' AND locked_by = :owner ORDER BY id;

-- name: expired_leases
-- Running rows are few (workers x claim batch): the status index finds them all, so
-- locked_until needs no index of its own (one less index to write per claim).
SELECT * FROM forkq_jobs
WHERE locked_until < :now AND status = 'running'
ORDER BY locked_until LIMIT :limit;

-- name: due_queues
-- One index dive per queue (the earliest ready run_at): cost independent of the backlog.
SELECT q.value AS queue,
       CAST(((SELECT MIN(j.run_at) FROM forkq_jobs j
              WHERE j.status = 'ready' AND j.queue = q.value) - :now) * 1000000 AS INTEGER) AS wait_us
FROM json_each(:queues) AS q;

-- name: count_ready
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM forkq_jobs WHERE queue = :queue AND status = 'ready' AND run_at <= :now
  LIMIT :cap);

-- name: stats
SELECT queue, status, COUNT(*) AS n,
       SUM(run_at > :now) AS delayed_n,
       CAST((:now - MIN(CASE WHEN run_at <= :now THEN run_at END)) * 1000000 AS INTEGER) AS oldest_us
FROM forkq_jobs GROUP BY status, queue;

-- name: get_job
SELECT * FROM forkq_jobs WHERE id = :id;

-- name: get_archived_job
SELECT * FROM forkq_jobs_archive WHERE id = :id;

-- name: list_jobs
SELECT * FROM forkq_jobs
WHERE (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
ORDER BY id DESC LIMIT :limit;

-- name: retry_jobs
UPDATE forkq_jobs
SET status = 'ready', run_at = :now, attempts = 0, finished_at = NULL, locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status <> 'running';

-- name: retry_dead
UPDATE forkq_jobs
SET status = 'ready', run_at = :now, attempts = 0, finished_at = NULL
WHERE status = 'dead' AND (:queue IS NULL OR queue = :queue);

-- name: cancel_jobs
DELETE FROM forkq_jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND status <> 'running';

-- name: purge_finished
DELETE FROM forkq_jobs WHERE id IN (
  SELECT id FROM forkq_jobs
  WHERE finished_at < :now - :age_us / 1000000.0 AND status = :status
    AND (:queue IS NULL OR queue = :queue)
  LIMIT :limit);

-- name: purge_archive
DELETE FROM forkq_jobs_archive WHERE id IN (
  SELECT id FROM forkq_jobs_archive
  WHERE finished_at < :now - :age_us / 1000000.0 AND (:queue IS NULL OR queue = :queue)
  LIMIT :limit);

-- name: set_paused
INSERT INTO forkq_queues (queue, paused, updated_at) VALUES (:queue, :paused, :now)
ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at;

-- name: paused_queues
SELECT queue FROM forkq_queues WHERE paused = 1;

-- name: register_process
INSERT INTO forkq_processes (name, host, pid, role, pool, master, started_at, heartbeat_at)
VALUES (:name, :host, :pid, :role, :pool, :master, :now, :now)
ON CONFLICT (name) DO UPDATE SET heartbeat_at = excluded.heartbeat_at;

-- name: beat_processes
UPDATE forkq_processes SET heartbeat_at = :now WHERE name IN (SELECT value FROM json_each(:names));

-- name: remove_processes
DELETE FROM forkq_processes WHERE name IN (SELECT value FROM json_each(:names));

-- name: stale_processes
SELECT * FROM forkq_processes WHERE heartbeat_at < :now - :age_us / 1000000.0;

-- name: list_processes
SELECT * FROM forkq_processes ORDER BY host, role, pool, pid;

-- name: lock_take
UPDATE forkq_locks
SET owner = :owner, acquired_at = :now, expires_at = :now + :ttl_us / 1000000.0
WHERE name = :name AND (expires_at < :now OR owner IS NULL);

-- name: lock_insert
INSERT OR IGNORE INTO forkq_locks (name, owner, acquired_at, expires_at)
VALUES (:name, :owner, :now, :now + :ttl_us / 1000000.0);

-- name: lock_renew
UPDATE forkq_locks SET expires_at = :now + :ttl_us / 1000000.0
WHERE name = :name AND owner = :owner AND expires_at >= :now;

-- name: lock_release
UPDATE forkq_locks SET owner = NULL, expires_at = :now
WHERE name = :name AND owner = :owner AND expires_at >= :now;

-- name: list_locks
SELECT name, owner, acquired_at, expires_at, expires_at >= :now AS live FROM forkq_locks ORDER BY name;

-- name: insert_slot
INSERT INTO forkq_schedule_slots (schedule, slot, enqueued_at) VALUES (:schedule, :slot, :now);

-- name: set_slot_job
UPDATE forkq_schedule_slots SET job_id = :job_id WHERE schedule = :schedule AND slot = :slot;

-- name: last_slot
SELECT MAX(slot) AS slot FROM forkq_schedule_slots WHERE schedule = :schedule;

-- name: load_alerts
SELECT alert_key, state, detail, since, notified_at FROM forkq_alerts;

-- name: save_alert
INSERT INTO forkq_alerts (alert_key, state, detail, since, notified_at)
VALUES (:key, :state, :detail, :since, :notified_at)
ON CONFLICT (alert_key) DO UPDATE SET state = excluded.state, detail = excluded.detail,
  since = excluded.since, notified_at = excluded.notified_at;

-- Schema upgrades: `upgrade_to_N` runs once on a database at version N-1 (`forkq schema apply`).

-- name: upgrade_to_2
-- Version 2 drops the lease index: expired leases are found through forkq_jobs_status.
DROP INDEX IF EXISTS forkq_jobs_lease;
