-- forkq named queries for SQLite (sqlite3, :name parameters), the same names as mysql.sql.
-- Times are REAL epoch seconds; the caller binds :now (one host, one clock). Id lists
-- are bound as one JSON array and read with json_each, so every statement stays fixed
-- text. Writes run inside BEGIN IMMEDIATE (the store opens it).

-- name: server_version
SELECT 'SQLite ' || sqlite_version() AS version;

-- name: connection_database
-- The file a caller's connection has open (routing.py checks connection= enqueues).
SELECT file AS name FROM pragma_database_list WHERE name = 'main';

-- name: session_setup
-- SQLite has no server session to set up (mysql.sql's: idle timeout, time zone, isolation,
-- Galera): never run.
SELECT :seconds AS seconds;

-- name: db_now
SELECT :now AS now;

-- name: galera_state
-- A Galera node's readiness (mysql.sql, for `[database] nodes`, which takes mysql:// URLs
-- only): never run.
SELECT 'wsrep_ready' AS Variable_name, 'OFF' AS Value WHERE 0;

-- name: max_allowed_packet
-- MySQL's statement limit (mysql.sql). SQLite's limit on a value is the connection's
-- SQLITE_LIMIT_LENGTH, read with getlimit (sqlite.py): never run.
SELECT 1000000000 AS bytes;

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
-- A delayed job (or one with a run_at), without a unique key. One due later than the
-- promotion horizon is stored `scheduled`, out of the claim's range.
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, enqueued_at, max_attempts)
VALUES (:queue, :handler, :payload, :priority, COALESCE(:run_at, :now + :delay_us / 1000000.0),
        CASE WHEN COALESCE(:run_at, :now + :delay_us / 1000000.0) > :now + :ahead_us / 1000000.0
             THEN 'scheduled' ELSE 'ready' END,
        :now, :max_attempts);

-- name: insert_job_unique
-- With a unique key (any run_at, limit_key, group_key or tags): every column named. It
-- conflicts with the job that holds the key (unique_key, unique_live: see mysql.sql),
-- which it changes: duplicates + 1 (so duplicates > 0 in the row returned tells a
-- conflict), and while that job waits its payload (replace, debounce) and run_at
-- (debounce: never earlier, at most debounce_max past its enqueue). The SET reads the
-- row as it was: status computes the new run_at again.
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, enqueued_at, unique_key,
                        max_attempts, limit_key, group_key, tags, unique_for, unique_while)
VALUES (:queue, :handler, :payload, :priority, COALESCE(:run_at, :now + :delay_us / 1000000.0),
        CASE WHEN COALESCE(:run_at, :now + :delay_us / 1000000.0) > :now + :ahead_us / 1000000.0
             THEN 'scheduled' ELSE 'ready' END,
        :now, :unique_key, :max_attempts, :limit_key, :group_key, :tags, :unique_for, :unique_while)
ON CONFLICT (unique_key, unique_live) WHERE unique_key IS NOT NULL DO UPDATE SET
  payload = CASE WHEN :replace AND status IN ('scheduled', 'ready', 'waiting')
                 THEN excluded.payload ELSE payload END,
  run_at = CASE WHEN :debounce AND status IN ('scheduled', 'ready', 'waiting')
                THEN MAX(run_at, MIN(excluded.run_at,
                                     COALESCE(enqueued_at + :debounce_max_us / 1000000.0, excluded.run_at)))
                ELSE run_at END,
  status = CASE WHEN NOT (:debounce AND status IN ('scheduled', 'ready')) THEN status
                WHEN MAX(run_at, MIN(excluded.run_at,
                                     COALESCE(enqueued_at + :debounce_max_us / 1000000.0, excluded.run_at)))
                     > :now + :ahead_us / 1000000.0 THEN 'scheduled'
                ELSE 'ready' END,
  duplicates = duplicates + 1
RETURNING id, duplicates;

-- name: claim_select
-- Only `ready` rows are in the range: jobs due later wait as `scheduled` (promote_select),
-- so the scan reads about `limit` rows however many jobs wait for later.
-- The claim index is named: with a range on run_at the planner picks forkq_jobs_status
-- and sorts the whole backlog for every batch.
-- Only what a worker needs (the same columns as MySQL's claim_select).
SELECT id, handler, payload, priority, attempts, max_attempts, unique_key, batch_id,
       run_at AS run_at_s, enqueued_at AS enqueued_at_s
FROM forkq_jobs INDEXED BY forkq_jobs_claim
WHERE queue = :queue AND status = 'ready' AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :limit;

-- name: claim_update
-- The first job of the batch starts now; the others are claimed, not started (mysql.sql).
UPDATE forkq_jobs
SET status = 'running', locked_by = :owner, attempts = attempts + 1,
    started_at = CASE WHEN id = :first THEN :now END,
    locked_until = :now + :lease_us / 1000000.0
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: mark_started
-- A held job's start, written by the master once it ran past the hand-back grace.
UPDATE forkq_jobs SET started_at = :now - :ago_us / 1000000.0
WHERE id = :id AND status IN ('running', 'cancelling') AND locked_by = :owner
  AND started_at IS NULL;

-- name: extend_leases
UPDATE forkq_jobs SET locked_until = :now + :lease_us / 1000000.0
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running' AND locked_by = :owner;

-- name: complete_delete
-- Also a `cancelling` job: its handler succeeded before the cancel reached it.
DELETE FROM forkq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('running', 'cancelling') AND locked_by = :owner;

-- name: complete_keep
-- A `cancelling` job too (its handler returned before the kill): done, and the cancel's
-- words are not its last error.
UPDATE forkq_jobs
SET last_error = CASE WHEN status = 'cancelling' THEN NULL ELSE last_error END,
    status = 'done', finished_at = :now, started_at = COALESCE(started_at, :now),
    locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('running', 'cancelling') AND locked_by = :owner;

-- name: complete_archive_copy
INSERT INTO forkq_jobs_archive
  (id, queue, handler, payload, status, priority, run_at, attempts, max_attempts, unique_key,
   locked_by, locked_until, last_error, enqueued_at, started_at, finished_at, archived_at)
SELECT id, queue, handler, payload, 'done', priority, run_at, attempts, max_attempts, unique_key,
       locked_by, NULL, CASE WHEN status = 'cancelling' THEN NULL ELSE last_error END, enqueued_at, COALESCE(started_at, :now), :now, :now
FROM forkq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('running', 'cancelling') AND locked_by = :owner;

-- name: fail_retry
-- `status` is 'scheduled' when the backoff reaches past the promotion horizon.
-- OR IGNORE: a job whose unique key another job took while it ran (schema 10) is left
-- running, never an error; the caller then ends it superseded (held_unique, supersede).
UPDATE OR IGNORE forkq_jobs
SET status = :status, run_at = :now + :delay_us / 1000000.0, last_error = :error,
    locked_by = NULL, locked_until = NULL, max_attempts = COALESCE(:max_attempts, max_attempts)
WHERE id = :id AND status = 'running' AND locked_by = :owner
  AND (:only_expired = 0 OR locked_until < :now);

-- name: fail_dead
UPDATE forkq_jobs
SET status = 'dead', finished_at = :now, started_at = COALESCE(started_at, :now),
    last_error = :error,
    locked_by = NULL, locked_until = NULL, max_attempts = COALESCE(:max_attempts, max_attempts)
WHERE id = :id AND status = 'running' AND locked_by = :owner
  AND (:only_expired = 0 OR locked_until < :now);

-- name: release
-- OR IGNORE: a job whose unique key another job took meanwhile (schema 10) is left
-- running, never an error; the caller then ends it superseded (held_unique, supersede).
UPDATE OR IGNORE forkq_jobs
SET status = 'ready', attempts = MAX(attempts - :uncount, 0), locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running' AND locked_by = :owner
  AND (:only_expired = 0 OR locked_until < :now);

-- name: held_unique
-- See mysql.sql: what a move back into the queue left running (its unique key held).
SELECT id, unique_key FROM forkq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running' AND locked_by = :owner
  AND unique_key IS NOT NULL AND (:only_expired = 0 OR locked_until < :now)
  AND (:max_snoozes IS NULL OR snoozes < :max_snoozes);

-- name: supersede
-- See mysql.sql: it yields to the holder of its unique key, ending cancelled.
UPDATE forkq_jobs
SET status = 'cancelled', finished_at = :now, last_error = :error,
    locked_by = NULL, locked_until = NULL
WHERE id = :id AND status = 'running' AND locked_by = :owner;

-- name: held_by
-- The running range of the status index, named: with ANALYZE's statistics (status has
-- few values) SQLite chose to read the whole table in id order (see mysql.sql).
SELECT * FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE status IN ('running', 'cancelling') AND locked_by = :owner ORDER BY id;

-- name: expired_leases
-- Running rows are few (workers x claim batch): the status index finds them all, so
-- locked_until needs no index of its own (one less index to write per claim). A row
-- with no lease at all is a raw INSERT's (forkq writes none): it comes first, and ends dead.
SELECT * FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE (locked_until < :now OR locked_until IS NULL) AND status IN ('running', 'cancelling')
ORDER BY locked_until LIMIT :limit;

-- name: unleased_bury
UPDATE forkq_jobs
SET status = 'dead', finished_at = :now, last_error = :error, locked_by = NULL
WHERE id = :id AND status = 'running' AND locked_until IS NULL;

-- name: cancelling_jobs
-- The master's once-a-second look for cancel requests (see mysql.sql).
SELECT id, locked_by FROM forkq_jobs WHERE status = 'cancelling' LIMIT :limit;

-- name: finish_cancel_select
-- The cancelling row as its holder left it, for its attempt's history (see mysql.sql).
SELECT * FROM forkq_jobs WHERE id = :id AND status = 'cancelling';

-- name: finish_cancel
UPDATE forkq_jobs
SET status = 'cancelled', finished_at = :now, locked_by = NULL, locked_until = NULL
WHERE id = :id AND status = 'cancelling';

-- name: due_queues
-- Three index dives per queue: cost independent of the backlog. The earliest ready
-- run_at (wake a child), the earliest scheduled (promote), the latest ready (demote).
SELECT q.value AS queue,
       CAST(((SELECT MIN(j.run_at) FROM forkq_jobs j
              WHERE j.status = 'ready' AND j.queue = q.value) - :now) * 1000000 AS INTEGER) AS wait_us,
       CAST(((SELECT MIN(j.run_at) FROM forkq_jobs j
              WHERE j.status = 'scheduled' AND j.queue = q.value) - :now) * 1000000 AS INTEGER)
         AS scheduled_us,
       CAST(((SELECT MAX(j.run_at) FROM forkq_jobs j
              WHERE j.status = 'ready' AND j.queue = q.value) - :now) * 1000000 AS INTEGER) AS last_us
FROM json_each(:queues) AS q;

-- name: promote_select
-- Scheduled jobs due within the horizon become ready (the claim still waits for run_at,
-- so a job is never early).
SELECT id FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE status = 'scheduled' AND queue = :queue AND run_at <= :now + :ahead_us / 1000000.0
ORDER BY run_at
LIMIT :limit;

-- name: promote_update
UPDATE forkq_jobs SET status = 'ready'
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'scheduled';

-- name: untimed_select
-- Jobs whose run_at is no time in epoch seconds: a raw INSERT of a text time
-- (`datetime('now')`), which SQLite keeps as TEXT, or of milliseconds (a JavaScript
-- `Date.now()`), past the year 3000 (32503680000 s). TEXT sorts after every number, so
-- neither ever falls due, and while a text one is a queue's only ready job the poll
-- reads it as due (text in arithmetic is a number: 2026) and wakes a child for nothing,
-- every poll. Both are the end of each status's range of the queue in the status index.
SELECT id FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE status IN ('ready', 'scheduled') AND queue = :queue AND run_at > 32503680000
LIMIT :limit;

-- name: untimed_bury
-- The text the producer wrote goes into the reason: a reader shows a time it cannot read
-- as 1970.
UPDATE forkq_jobs
SET status = 'dead', finished_at = :now, last_error = :error || ' (it holds ' || quote(run_at) || ')',
    locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('ready', 'scheduled');

-- name: demote_select
-- Ready rows far in the future (a raw INSERT with a run_at ahead) leave the claim's range.
SELECT id FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE status = 'ready' AND queue = :queue AND run_at > :now + :ahead_us / 1000000.0
ORDER BY run_at DESC
LIMIT :limit;

-- name: demote_update
UPDATE forkq_jobs SET status = 'scheduled'
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'ready';

-- name: count_ready
-- Due jobs a claim could take now, not those parked on a full limit's bucket (mysql.sql).
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM forkq_jobs INDEXED BY forkq_jobs_limit
  WHERE status = 'ready' AND limit_wait = '' AND queue = :queue AND run_at <= :now
  LIMIT :cap);

-- name: stats_first_queue
-- Queue names by a loose index scan on forkq_jobs_claim, one dive per name (as in
-- mysql.sql): this is the first; stats_queue gives the next one.
SELECT MIN(queue) AS queue FROM forkq_jobs;

-- name: stats_queue
-- One queue, one statement: index ranges of forkq_jobs_status that stop after :limit
-- entries (the caller's cap + 1), and single dives for the oldest due run_at and the
-- next queue name; flat cost however many rows the table holds. Counts no alert rule
-- reads (not due yet, scheduled, running, done) stop at :minor_limit instead. Running
-- counts a cancelling job too: its handler runs until its host stops it.
SELECT
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'ready' AND queue = :queue AND run_at <= :now LIMIT :limit)) AS ready,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'ready' AND queue = :queue AND run_at > :now LIMIT :minor_limit)) AS ready_later,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'scheduled' AND queue = :queue LIMIT :minor_limit)) AS scheduled,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status IN ('running', 'cancelling') AND queue = :queue AND started_at IS NOT NULL
     LIMIT :minor_limit)) AS running,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'dead' AND queue = :queue LIMIT :limit)) AS dead,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'done' AND queue = :queue LIMIT :minor_limit)) AS done,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'waiting' AND queue = :queue LIMIT :minor_limit)) AS waiting,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'cancelled' AND queue = :queue LIMIT :minor_limit)) AS cancelled,
  CAST((:now - (SELECT MIN(run_at) FROM forkq_jobs
     WHERE status = 'ready' AND queue = :queue AND run_at <= :now)) * 1000000 AS INTEGER) AS oldest_us,
  (SELECT MIN(queue) FROM forkq_jobs WHERE queue > :queue) AS next_queue;

-- name: stats_queue_exact
-- stats_queue without a cap, for `forkq status --exact` only: plain counts of the same ranges.
SELECT
  (SELECT COUNT(*) FROM forkq_jobs
     WHERE status = 'ready' AND queue = :queue AND run_at <= :now) AS ready,
  (SELECT COUNT(*) FROM forkq_jobs
     WHERE status = 'ready' AND queue = :queue AND run_at > :now) AS ready_later,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'scheduled' AND queue = :queue) AS scheduled,
  (SELECT COUNT(*) FROM forkq_jobs
     WHERE status IN ('running', 'cancelling') AND queue = :queue AND started_at IS NOT NULL) AS running,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'dead' AND queue = :queue) AS dead,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'done' AND queue = :queue) AS done,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'waiting' AND queue = :queue) AS waiting,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'cancelled' AND queue = :queue) AS cancelled,
  CAST((:now - (SELECT MIN(run_at) FROM forkq_jobs
     WHERE status = 'ready' AND queue = :queue AND run_at <= :now)) * 1000000 AS INTEGER) AS oldest_us,
  (SELECT MIN(queue) FROM forkq_jobs WHERE queue > :queue) AS next_queue;

-- name: get_job
SELECT * FROM forkq_jobs WHERE id = :id;

-- name: get_archived_job
SELECT * FROM forkq_jobs_archive WHERE id = :id;

-- name: list_jobs_status
-- `forkq jobs --status S` when S has few jobs: the status index's range, sorted. list_jobs
-- is a SCAN here (its `:status IS NULL OR` hides the index): the whole table backwards
-- for a few old dead jobs.
SELECT * FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE status = :status AND (:queue IS NULL OR queue = :queue)
  AND (:status <> 'running' OR started_at IS NOT NULL) AND id <= :highest
ORDER BY id DESC LIMIT :limit;

-- name: list_jobs
SELECT * FROM forkq_jobs
WHERE (:status IS NULL OR status = :status) AND (:queue IS NULL OR queue = :queue)
  AND (:status IS NULL OR :status <> 'running' OR started_at IS NOT NULL)
  AND id <= :highest
ORDER BY id DESC LIMIT :limit;

-- name: retry_jobs
-- IGNORE: a job whose unique key another job took meanwhile (schema 10) is left as
-- it is, never an error, and not_retried says why (the job holding the key).
UPDATE OR IGNORE forkq_jobs
SET status = 'ready', run_at = :now, attempts = 0, finished_at = NULL, locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status NOT IN ('running', 'cancelling');

-- name: deps_retry_jobs
-- retry_jobs from schema 14: a waiting job is left alone (it runs once its parents are
-- done), and so is a cancelled job enqueued with parents (deps & 2): its rows of
-- forkq_dependencies went when it ended, so it could no longer wait on them.
UPDATE OR IGNORE forkq_jobs
SET status = 'ready', run_at = :now, attempts = 0, finished_at = NULL, locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status NOT IN ('running', 'cancelling', 'waiting')
  AND (status <> 'cancelled' OR (deps & 2) = 0);

-- name: deps_flags
SELECT status, deps FROM forkq_jobs WHERE id = :id;

-- name: dead_ids
-- A chunk of the dead jobs (of a queue) to retry (Store.retry_dead); skip: those a retry
-- left dead (a unique key held by another job), else they would come first every time.
SELECT id FROM forkq_jobs
WHERE status = 'dead' AND (:queue IS NULL OR queue = :queue)
  AND id NOT IN (SELECT value FROM json_each(:skip))
LIMIT :limit;

-- name: dead_among
-- Which of these jobs a retry left dead.
SELECT id FROM forkq_jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'dead';

-- name: cancel_select
-- Cancelling (Store.cancel_jobs, inside BEGIN IMMEDIATE): the status each job had.
SELECT id, status FROM forkq_jobs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: cancel_waiting
-- A job not yet running ends `cancelled` at once and is never claimed or retried.
UPDATE forkq_jobs
SET status = 'cancelled', finished_at = :now, last_error = :error,
    locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('waiting', 'ready', 'scheduled');

-- name: cancel_running
-- A running job becomes `cancelling`: its master kills the child and marks it `cancelled`.
UPDATE forkq_jobs SET status = 'cancelling', last_error = :error
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'running';

-- name: archived_ids
SELECT id FROM forkq_jobs_archive WHERE id IN (SELECT value FROM json_each(:ids));

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
INSERT INTO forkq_processes (name, host, pid, role, pool, master, node, started_at, heartbeat_at)
VALUES (:name, :host, :pid, :role, :pool, :master, :node, :now, :now)
ON CONFLICT (name) DO UPDATE SET heartbeat_at = excluded.heartbeat_at;

-- name: register_process_no_node
-- The same on a schema older than version 4, which has no `node` column.
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

-- name: set_progress
UPDATE forkq_jobs SET progress = :progress
WHERE id = :id AND status = 'running' AND locked_by = :owner;

-- name: schedule_add
-- A schedule added at runtime; a name already added is a duplicate key (the caller says so).
INSERT INTO forkq_schedules
  (name, cron, handler, queue, timezone, payload, priority, misfire, paused, since, changed_by, updated_at)
VALUES (:name, :cron, :handler, :queue, :timezone, :payload, :priority,
        :misfire, 0, :now, :by, :now);

-- name: schedule_pause
UPDATE forkq_schedules SET paused = 1, changed_by = :by, updated_at = :now
WHERE name = :name AND paused = 0;

-- name: schedule_resume
-- Slots that fell due while it was paused are not run: `since` moves to now.
UPDATE forkq_schedules SET paused = 0, since = :now, changed_by = :by, updated_at = :now
WHERE name = :name AND paused = 1;

-- name: schedule_remove
DELETE FROM forkq_schedules WHERE name = :name;

-- name: schedule_list
-- Every schedule added at runtime: a handful of rows, read once per check tick.
SELECT name, cron, handler, queue, timezone, payload, priority, misfire, paused,
       since, changed_by, updated_at
FROM forkq_schedules ORDER BY name;

-- name: load_alerts
SELECT alert_key, state, detail, since, notified_at FROM forkq_alerts;

-- name: save_alert
INSERT INTO forkq_alerts (alert_key, state, detail, since, notified_at)
VALUES (:key, :state, :detail, :since, :notified_at)
ON CONFLICT (alert_key) DO UPDATE SET state = excluded.state, detail = excluded.detail,
  since = excluded.since, notified_at = excluded.notified_at;

-- name: result_job
-- A job as a Django task result reads it (supervisor.contrib.django), on the application's
-- own connection. An archived job is found too; at most one of the two tables holds the id.
SELECT id, queue, handler, payload, status, priority, attempts, last_error, locked_by,
       enqueued_at, started_at, finished_at
FROM forkq_jobs WHERE id = :id
UNION ALL
SELECT id, queue, handler, payload, status, priority, attempts, last_error, locked_by,
       enqueued_at, started_at, finished_at
FROM forkq_jobs_archive WHERE id = :id;

-- name: get_result
SELECT job_id, queue, status, payload, return_value, errors, workers,
       enqueued_at, started_at, attempted_at, finished_at
FROM forkq_results WHERE job_id = :id;

-- name: save_result
-- One attempt's end: the row is the job's whole record so far (see mysql.sql).
INSERT INTO forkq_results (job_id, queue, status, payload, return_value, errors, workers,
                           enqueued_at, started_at, attempted_at, finished_at)
VALUES (:id, :queue, :status, :payload, :return_value, :errors, :workers,
        :enqueued_at, :started_at, :attempted_at, :finished_at)
ON CONFLICT (job_id) DO UPDATE SET status = excluded.status,
  return_value = excluded.return_value, errors = excluded.errors, workers = excluded.workers,
  started_at = excluded.started_at, attempted_at = excluded.attempted_at,
  finished_at = excluded.finished_at;

-- name: purge_results
-- Results older than the pool's retention, unless their job waits or runs again.
DELETE FROM forkq_results WHERE job_id IN (
  SELECT r.job_id FROM forkq_results r
  WHERE r.queue = :queue AND r.finished_at < :now - :age_us / 1000000.0
    AND NOT EXISTS (SELECT 1 FROM forkq_jobs j
                    WHERE j.id = r.job_id
                      AND j.status IN ('ready', 'scheduled', 'running', 'cancelling'))
  LIMIT :limit);

-- results and attempts -----------------------------------------------------------------------
-- The same names as mysql.sql (store/results.py).

-- name: keep_result
INSERT INTO forkq_results (job_id, queue, status, payload, return_value, errors, workers)
VALUES (:id, :queue, 'succeeded', '', :value, '[]', '[]')
ON CONFLICT (job_id) DO UPDATE SET status = 'succeeded', return_value = excluded.return_value,
  finished_at = :now;

-- name: job_result
SELECT job_id, status, return_value, finished_at FROM forkq_results WHERE job_id = :id;

-- name: job_state
SELECT status FROM forkq_jobs WHERE id = :id
UNION ALL
SELECT status FROM forkq_jobs_archive WHERE id = :id;

-- name: record_attempt
-- ended_at named (the column default is julianday('now'), to the millisecond only), and
-- a start never after it.
INSERT INTO forkq_attempts (job_id, slot, attempt, queue, outcome, worker, host, pid, error,
                            started_at, ended_at)
VALUES (:id, :slot, :attempt, :queue, :outcome, :worker, :host, :pid, :error,
        MIN(:started_at, :now), :now)
ON CONFLICT (job_id, slot) DO UPDATE SET attempt = excluded.attempt, queue = excluded.queue,
  outcome = excluded.outcome, worker = excluded.worker, host = excluded.host,
  pid = excluded.pid, error = excluded.error, started_at = excluded.started_at,
  ended_at = :now;

-- name: drop_older_runs
-- Store.keep_earlier_run: the runs before the last one (moved below slot 0 at a retry).
DELETE FROM forkq_attempts WHERE job_id IN (SELECT value FROM json_each(:ids)) AND slot < 0;

-- name: shift_attempts
-- The last run's attempts out of slots 0-19, which the retried run writes again.
UPDATE forkq_attempts SET slot = slot - 20 WHERE job_id IN (SELECT value FROM json_each(:ids));

-- name: job_attempts
SELECT attempt, outcome, worker, host, pid, error, started_at, ended_at
FROM forkq_attempts WHERE job_id = :id ORDER BY ended_at, attempt;

-- name: purge_attempts
DELETE FROM forkq_attempts WHERE rowid IN (
  SELECT a.rowid FROM forkq_attempts a
  WHERE a.queue = :queue AND a.ended_at < :now - :age_us / 1000000.0
    AND NOT EXISTS (SELECT 1 FROM forkq_jobs j
                    WHERE j.id = a.job_id
                      AND j.status IN ('ready', 'scheduled', 'running', 'cancelling'))
  LIMIT :limit);

-- web ----------------------------------------------------------------------------------------
-- The dashboard's reads and actions (supervisor/web), the same names as mysql.sql: primary
-- key dives or index ranges that stop at a LIMIT; no OFFSET anywhere.

-- name: record_throughput
-- Each master adds its children's finished jobs to the current minute (see mysql.sql).
INSERT INTO forkq_throughput (minute, queue, host, done, failed)
VALUES (:minute, :queue, :host, :done, :failed)
ON CONFLICT (minute, queue, host) DO UPDATE
SET done = done + excluded.done, failed = failed + excluded.failed;

-- name: prune_throughput
DELETE FROM forkq_throughput WHERE rowid IN (
  SELECT rowid FROM forkq_throughput WHERE minute < :now - :age_us / 1000000.0 LIMIT :limit);

-- name: web_throughput
SELECT minute, queue, SUM(done) AS done, SUM(failed) AS failed
FROM forkq_throughput
WHERE minute >= :now - :age_us / 1000000.0
GROUP BY minute, queue
ORDER BY minute, queue;

-- name: record_handler_stats
-- Each master adds its children's attempts to the current minute (see mysql.sql).
INSERT INTO forkq_handler_stats (minute, handler, host, jobs, failed, seconds, fastest,
  slowest, b00, b01, b02, b03, b04, b05, b06, b07, b08, b09, b10, b11, b12, b13, b14, b15,
  b16, b17, b18, b19, b20, b21, b22, b23)
VALUES (:minute, :handler, :host, :jobs, :failed, :seconds, :fastest, :slowest, :b00, :b01,
  :b02, :b03, :b04, :b05, :b06, :b07, :b08, :b09, :b10, :b11, :b12, :b13, :b14, :b15, :b16,
  :b17, :b18, :b19, :b20, :b21, :b22, :b23)
ON CONFLICT (minute, handler, host) DO UPDATE SET
  jobs = jobs + excluded.jobs, failed = failed + excluded.failed,
  seconds = seconds + excluded.seconds,
  fastest = min(coalesce(fastest, excluded.fastest), coalesce(excluded.fastest, fastest)),
  slowest = max(coalesce(slowest, excluded.slowest), coalesce(excluded.slowest, slowest)),
  b00 = b00 + excluded.b00, b01 = b01 + excluded.b01, b02 = b02 + excluded.b02,
  b03 = b03 + excluded.b03, b04 = b04 + excluded.b04, b05 = b05 + excluded.b05,
  b06 = b06 + excluded.b06, b07 = b07 + excluded.b07, b08 = b08 + excluded.b08,
  b09 = b09 + excluded.b09, b10 = b10 + excluded.b10, b11 = b11 + excluded.b11,
  b12 = b12 + excluded.b12, b13 = b13 + excluded.b13, b14 = b14 + excluded.b14,
  b15 = b15 + excluded.b15, b16 = b16 + excluded.b16, b17 = b17 + excluded.b17,
  b18 = b18 + excluded.b18, b19 = b19 + excluded.b19, b20 = b20 + excluded.b20,
  b21 = b21 + excluded.b21, b22 = b22 + excluded.b22, b23 = b23 + excluded.b23;

-- name: prune_handler_stats
DELETE FROM forkq_handler_stats WHERE rowid IN (
  SELECT rowid FROM forkq_handler_stats WHERE minute < :now - :age_us / 1000000.0 LIMIT :limit);

-- name: web_handler_stats
SELECT handler, SUM(jobs) AS jobs, SUM(failed) AS failed, SUM(seconds) AS seconds,
       MIN(fastest) AS fastest, MAX(slowest) AS slowest,
       SUM(b00) AS b00, SUM(b01) AS b01, SUM(b02) AS b02, SUM(b03) AS b03, SUM(b04) AS b04,
       SUM(b05) AS b05, SUM(b06) AS b06, SUM(b07) AS b07, SUM(b08) AS b08, SUM(b09) AS b09,
       SUM(b10) AS b10, SUM(b11) AS b11, SUM(b12) AS b12, SUM(b13) AS b13, SUM(b14) AS b14,
       SUM(b15) AS b15, SUM(b16) AS b16, SUM(b17) AS b17, SUM(b18) AS b18, SUM(b19) AS b19,
       SUM(b20) AS b20, SUM(b21) AS b21, SUM(b22) AS b22, SUM(b23) AS b23
FROM forkq_handler_stats
WHERE minute >= :now - :age_us / 1000000.0
GROUP BY handler
ORDER BY handler;

-- name: web_handler_series
SELECT minute, SUM(jobs) AS jobs, SUM(failed) AS failed,
       SUM(seconds) AS seconds, MIN(fastest) AS fastest, MAX(slowest) AS slowest,
       SUM(b00) AS b00, SUM(b01) AS b01, SUM(b02) AS b02, SUM(b03) AS b03, SUM(b04) AS b04,
       SUM(b05) AS b05, SUM(b06) AS b06, SUM(b07) AS b07, SUM(b08) AS b08, SUM(b09) AS b09,
       SUM(b10) AS b10, SUM(b11) AS b11, SUM(b12) AS b12, SUM(b13) AS b13, SUM(b14) AS b14,
       SUM(b15) AS b15, SUM(b16) AS b16, SUM(b17) AS b17, SUM(b18) AS b18, SUM(b19) AS b19,
       SUM(b20) AS b20, SUM(b21) AS b21, SUM(b22) AS b22, SUM(b23) AS b23
FROM forkq_handler_stats INDEXED BY forkq_handler_stats_handler
WHERE handler = :handler AND minute >= :now - :age_us / 1000000.0
GROUP BY minute
ORDER BY minute;

-- name: web_id_range
-- Two subqueries: SQLite reads MIN or MAX alone from the end of the rowid, not both at once.
SELECT (SELECT MIN(id) FROM forkq_jobs) AS first, (SELECT MAX(id) FROM forkq_jobs) AS last;

-- name: web_jobs_window
-- NOT INDEXED: the rowid range is read, never an index the filters might tempt the planner to.
SELECT id, queue, handler, status, priority, attempts, max_attempts, unique_key, locked_by,
       locked_until, run_at, enqueued_at, started_at, finished_at,
       SUBSTR(last_error, 1, 300) AS last_error, SUBSTR(payload, 1, 120) AS payload
FROM forkq_jobs NOT INDEXED
WHERE id < :before AND id >= :floor
  AND (:queue IS NULL OR queue = :queue)
  AND (:status IS NULL OR status = :status)
  AND (:status IS NULL OR :status <> 'running' OR started_at IS NOT NULL)
  AND (:handler IS NULL OR handler = :handler)
ORDER BY id DESC
LIMIT :limit;

-- name: web_jobs_search
SELECT id, queue, handler, status, priority, attempts, max_attempts, unique_key, locked_by,
       locked_until, run_at, enqueued_at, started_at, finished_at,
       SUBSTR(last_error, 1, 300) AS last_error, SUBSTR(payload, 1, 120) AS payload
FROM forkq_jobs NOT INDEXED
WHERE id < :before AND id >= :floor
  AND (:queue IS NULL OR queue = :queue)
  AND (:status IS NULL OR status = :status)
  AND (:handler IS NULL OR handler = :handler)
  AND (:error IS NULL OR LOWER(last_error) LIKE :error ESCAPE '!')
  AND (:tag IS NULL
       OR (CASE WHEN json_valid(tags) THEN EXISTS (SELECT 1 FROM json_each(tags) WHERE value = :tag) END))
  AND (:path IS NULL
       OR (CASE WHEN json_valid(payload) THEN CAST(json_extract(payload, :path) AS TEXT) END) = :value)
ORDER BY id DESC
LIMIT :limit;

-- name: web_count_status
SELECT COUNT(*) AS n FROM (SELECT 1 FROM forkq_jobs INDEXED BY forkq_jobs_status
  WHERE status = :status
  AND (:status <> 'running' OR started_at IS NOT NULL) LIMIT :limit);

-- name: web_count_status_queue
SELECT COUNT(*) AS n FROM (SELECT 1 FROM forkq_jobs INDEXED BY forkq_jobs_status
  WHERE status = :status AND queue = :queue
  AND (:status <> 'running' OR started_at IS NOT NULL) LIMIT :limit);

-- name: web_jobs_status
SELECT id, queue, handler, status, priority, attempts, max_attempts, unique_key, locked_by,
       locked_until, run_at, enqueued_at, started_at, finished_at,
       SUBSTR(last_error, 1, 300) AS last_error, SUBSTR(payload, 1, 120) AS payload
FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE status = :status AND id < :before AND (:handler IS NULL OR handler = :handler)
  AND (:status <> 'running' OR started_at IS NOT NULL)
ORDER BY id DESC
LIMIT :limit;

-- name: web_jobs_status_queue
SELECT id, queue, handler, status, priority, attempts, max_attempts, unique_key, locked_by,
       locked_until, run_at, enqueued_at, started_at, finished_at,
       SUBSTR(last_error, 1, 300) AS last_error, SUBSTR(payload, 1, 120) AS payload
FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE status = :status AND queue = :queue AND id < :before
  AND (:handler IS NULL OR handler = :handler)
  AND (:status <> 'running' OR started_at IS NOT NULL)
ORDER BY id DESC
LIMIT :limit;

-- name: ready_among
-- How many of these jobs are ready: what a retry really changed (MySQL's found-rows count
-- includes the rows UPDATE IGNORE left alone).
SELECT COUNT(*) AS n FROM forkq_jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'ready';

-- name: key_holder
-- Another job holding this unique key in its scope (schema 10): why a retry was ignored.
SELECT id FROM forkq_jobs
WHERE unique_key = :key AND id <> :id AND unique_live IS NOT NULL
ORDER BY id LIMIT 1;

-- name: web_job_by_key
SELECT id FROM forkq_jobs WHERE unique_key = :key;

-- name: web_process
SELECT * FROM forkq_processes WHERE name = :name;

-- name: web_running
SELECT j.id, j.queue, j.handler, j.status, j.priority, j.attempts, j.max_attempts,
       j.unique_key, j.locked_by, j.locked_until, j.run_at, j.enqueued_at, j.started_at,
       j.finished_at, SUBSTR(j.last_error, 1, 300) AS last_error,
       SUBSTR(j.payload, 1, 120) AS payload, j.progress, p.host AS host, p.pid AS pid
FROM forkq_jobs j INDEXED BY forkq_jobs_status
LEFT JOIN forkq_processes p ON p.name = j.locked_by
WHERE j.status IN ('running', 'cancelling') AND (:queue IS NULL OR j.queue = :queue)
  AND (j.status = 'cancelling' OR j.started_at IS NOT NULL)
ORDER BY j.started_at, j.id
LIMIT :limit;

-- name: web_discard
DELETE FROM forkq_jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'dead';

-- name: web_discard_dead
DELETE FROM forkq_jobs WHERE id IN (
  SELECT id FROM forkq_jobs WHERE status = 'dead' AND queue = :queue LIMIT :limit);

-- name: web_slots
SELECT slot, job_id, enqueued_at
FROM forkq_schedule_slots
WHERE schedule = :schedule
ORDER BY slot DESC
LIMIT :limit;

-- limits and snooze -----------------------------------------------------------------------
-- Flow control (see mysql.sql). Writes run under BEGIN IMMEDIATE, which already makes one
-- claim at a time: the bucket rows carry the state, and "locking" them is reading them.

-- name: insert_job_keyed
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, enqueued_at, unique_key,
                        max_attempts, limit_key)
VALUES (:queue, :handler, :payload, :priority, COALESCE(:run_at, :now + :delay_us / 1000000.0),
        CASE WHEN COALESCE(:run_at, :now + :delay_us / 1000000.0) > :now + :ahead_us / 1000000.0
             THEN 'scheduled' ELSE 'ready' END,
        :now, :unique_key, :max_attempts, :limit_key)
RETURNING id;

-- name: insert_job_grouped
-- A job with a group_key (its tenant in a fair pool): both keys named (schema 8).
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, enqueued_at, unique_key,
                        max_attempts, limit_key, group_key)
VALUES (:queue, :handler, :payload, :priority, COALESCE(:run_at, :now + :delay_us / 1000000.0),
        CASE WHEN COALESCE(:run_at, :now + :delay_us / 1000000.0) > :now + :ahead_us / 1000000.0
             THEN 'scheduled' ELSE 'ready' END,
        :now, :unique_key, :max_attempts, :limit_key, :group_key)
RETURNING id;

-- name: insert_job_tagged
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, enqueued_at, unique_key,
                        max_attempts, limit_key, group_key, tags)
VALUES (:queue, :handler, :payload, :priority, COALESCE(:run_at, :now + :delay_us / 1000000.0),
        CASE WHEN COALESCE(:run_at, :now + :delay_us / 1000000.0) > :now + :ahead_us / 1000000.0
             THEN 'scheduled' ELSE 'ready' END,
        :now, :unique_key, :max_attempts, :limit_key, :group_key, :tags)
RETURNING id;

-- name: insert_job_batched
-- A job of a batch never has a unique key (q.batch() refuses one): no RETURNING, so the
-- insert costs what a plain one does (the id is the cursor's lastrowid).
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, enqueued_at, unique_key,
                        max_attempts, limit_key, group_key, tags, batch_id)
VALUES (:queue, :handler, :payload, :priority, COALESCE(:run_at, :now + :delay_us / 1000000.0),
        CASE WHEN COALESCE(:run_at, :now + :delay_us / 1000000.0) > :now + :ahead_us / 1000000.0
             THEN 'scheduled' ELSE 'ready' END,
        :now, :unique_key, :max_attempts, :limit_key, :group_key, :tags, :batch_id);

-- name: claim_select_limited
SELECT id, handler, payload, priority, attempts, max_attempts, unique_key, limit_key, batch_id,
       run_at AS run_at_s, enqueued_at AS enqueued_at_s
FROM forkq_jobs INDEXED BY forkq_jobs_limit
WHERE status = 'ready' AND limit_wait = '' AND queue = :queue AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :limit;

-- name: claim_update_at
UPDATE forkq_jobs
SET status = 'running', locked_by = :owner, attempts = attempts + 1,
    started_at = CASE WHEN id = :first THEN :started END, limit_wait = '',
    locked_until = :now + :lease_us / 1000000.0
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: limit_heads
SELECT b.value AS bucket,
       (SELECT json_array(-j.priority, CAST(j.run_at * 1000000 AS INTEGER), j.id)
        FROM forkq_jobs j INDEXED BY forkq_jobs_limit
        WHERE j.status = 'ready' AND j.limit_wait = b.value AND j.queue = :queue
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT 1) AS head
FROM json_each(:buckets) AS b;

-- name: unpark_select_queue
SELECT id FROM forkq_jobs INDEXED BY forkq_jobs_limit
WHERE status = 'ready' AND limit_wait = :bucket AND queue = :queue
ORDER BY priority DESC, run_at, id
LIMIT :limit;

-- name: claim_update_reserve
-- mysql.sql's one-statement claim needs a multi-table UPDATE: on SQLite (one claim at a
-- time, statements in process) claims always take the long way. Never run: it claims
-- nothing (0 rows), which sends the claim there.
UPDATE forkq_jobs SET status = status
WHERE 0 AND id IN (SELECT value FROM json_each(:ids)) AND :owner IS NOT NULL
  AND :lease_us + :count + :concurrency IS NOT NULL AND :name || :key IS NOT NULL;

-- name: limit_lock
-- running_all: every running job, an upper bound of any bucket's (an index range of the
-- few running rows); when it leaves room the claim need not count bucket by bucket.
SELECT name, limit_key, rate_slice_us, rate_base, rate_counts, running_counted, running_added,
       wake_at, :now AS now,
       (SELECT COUNT(*) FROM forkq_jobs INDEXED BY forkq_jobs_status
        WHERE status IN ('running', 'cancelling')) AS running_all
FROM forkq_limits
WHERE (name, limit_key) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:buckets))
ORDER BY name, limit_key;

-- name: limit_lock_one
SELECT name, limit_key, rate_slice_us, rate_base, rate_counts, running_counted, running_added,
       wake_at, :now AS now,
       (SELECT COUNT(*) FROM forkq_jobs INDEXED BY forkq_jobs_status
        WHERE status IN ('running', 'cancelling')) AS running_all
FROM forkq_limits
WHERE name = :name AND limit_key = :key;

-- name: limit_lock_skip
SELECT name, limit_key, rate_slice_us, rate_base, rate_counts, running_counted, running_added,
       wake_at, :now AS now
FROM forkq_limits
WHERE (name, limit_key) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:buckets))
ORDER BY name, limit_key;

-- name: limit_insert
INSERT OR IGNORE INTO forkq_limits (name, limit_key, updated_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), :now FROM json_each(:buckets);

-- name: limit_usage
SELECT handler, queue, limit_key, COUNT(*) AS n
FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE status IN ('running', 'cancelling')
GROUP BY handler, queue, limit_key;

-- name: limit_save
INSERT INTO forkq_limits (name, limit_key, rate_slice_us, rate_base, rate_counts, wake_at,
                          running_counted, running_added, updated_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'), json_extract(value, '$[7]'), :now
FROM json_each(:states) WHERE true
ON CONFLICT (name, limit_key) DO UPDATE SET
  rate_slice_us = excluded.rate_slice_us, rate_base = excluded.rate_base,
  rate_counts = excluded.rate_counts, wake_at = excluded.wake_at,
  running_counted = excluded.running_counted, running_added = excluded.running_added,
  updated_at = excluded.updated_at;

-- name: claim_update_limited
-- SQLite updates one table per statement: this is claim_update_at, and the store writes
-- the buckets with limit_save (mysql.sql does both in one statement).
UPDATE forkq_jobs
SET status = 'running', locked_by = :owner, attempts = attempts + 1,
    started_at = CASE WHEN id = :first THEN :started END, limit_wait = '',
    locked_until = :now + :lease_us / 1000000.0
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: limit_park
-- `+status`: the ids decide the plan, not the status index (which holds every ready job).
UPDATE forkq_jobs SET limit_wait = :bucket
WHERE id IN (SELECT value FROM json_each(:ids)) AND +status = 'ready';

-- name: limit_refuse
-- Ready jobs a claim under limits cannot put in a bucket (a limit_key holding a NUL: SQLite's
-- JSON ends a string there): dead at once, with the reason.
UPDATE forkq_jobs SET status = 'dead', finished_at = :now, last_error = :error
WHERE id IN (SELECT value FROM json_each(:ids)) AND +status = 'ready';

-- name: limit_due
SELECT name, limit_key FROM forkq_limits INDEXED BY forkq_limits_wake
WHERE wake_at <= :now
ORDER BY wake_at
LIMIT :limit;

-- name: unpark_select
SELECT id FROM forkq_jobs INDEXED BY forkq_jobs_limit
WHERE status = 'ready' AND limit_wait = :bucket
ORDER BY queue, priority DESC, run_at, id
LIMIT :limit;

-- name: unpark_update
UPDATE forkq_jobs SET limit_wait = ''
WHERE id IN (SELECT value FROM json_each(:ids)) AND +status = 'ready';

-- name: parked_bucket_after
SELECT MIN(limit_wait) AS limit_wait FROM forkq_jobs INDEXED BY forkq_jobs_limit
WHERE status = 'ready' AND limit_wait > :after;

-- name: limit_wake
INSERT INTO forkq_limits (name, limit_key, wake_at, updated_at)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), :now, :now FROM json_each(:buckets) WHERE true
ON CONFLICT (name, limit_key) DO UPDATE SET wake_at = COALESCE(forkq_limits.wake_at, :now);

-- name: limit_idle
SELECT name, limit_key FROM forkq_limits
WHERE wake_at IS NULL AND updated_at < :now - :age_us / 1000000.0
LIMIT :limit;

-- name: limit_delete
DELETE FROM forkq_limits
WHERE (name, limit_key) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:buckets))
  AND wake_at IS NULL;

-- name: limit_rows
SELECT name, limit_key, rate_slice_us, rate_base, rate_counts, running_counted, running_added,
       wake_at, :now AS now
FROM forkq_limits
ORDER BY name, limit_key
LIMIT :limit;

-- name: limit_waiting
SELECT w.limit_wait, COUNT(*) AS n
FROM (SELECT limit_wait FROM forkq_jobs INDEXED BY forkq_jobs_limit
      WHERE status = 'ready' AND limit_wait > '' LIMIT :limit) AS w
GROUP BY w.limit_wait;

-- name: snooze
-- OR IGNORE: as fail_retry's (a job whose unique key was taken meanwhile ends superseded).
UPDATE OR IGNORE forkq_jobs
SET status = :status, run_at = :now + :delay_us / 1000000.0,
    attempts = MAX(attempts - 1, 0), snoozes = snoozes + 1,
    locked_by = NULL, locked_until = NULL
WHERE id = :id AND status = 'running' AND locked_by = :owner
  AND snoozes < :max_snoozes;

-- Fair share within a queue (see mysql.sql and supervisor/store/fair.py). Claims run under
-- BEGIN IMMEDIATE: one at a time, so nothing is skipped as locked.

-- name: join_round
-- A producer's job with a group_key: its tenant joins its queue's round now (mysql.sql).
INSERT OR IGNORE INTO forkq_tenants (queue, tenant) VALUES (:queue, :group_key);

-- name: join_rounds
INSERT OR IGNORE INTO forkq_tenants (queue, tenant)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(:pairs);

-- name: fair_prune
DELETE FROM forkq_tenants WHERE rowid IN (
  SELECT rowid FROM forkq_tenants
  WHERE queue NOT IN (SELECT value FROM json_each(:queues)) LIMIT :limit);

-- name: fair_first_tenant
SELECT d.tenant, d.walk, t.last_served
FROM (SELECT * FROM (SELECT tenant, 1 AS walk FROM forkq_jobs INDEXED BY forkq_jobs_tenant
                     WHERE queue = :queue AND status = 'ready'
                     ORDER BY tenant LIMIT 1)
      UNION ALL
      SELECT * FROM (SELECT tenant, 0 AS walk FROM forkq_jobs INDEXED BY forkq_jobs_status
                     WHERE status = 'ready' AND queue = :queue
                     ORDER BY run_at DESC LIMIT 1)) AS d
LEFT JOIN forkq_tenants t ON t.queue = :queue AND t.tenant = d.tenant;

-- name: fair_next_tenant
SELECT d.tenant, d.walk, t.last_served
FROM (SELECT * FROM (SELECT tenant, 1 AS walk FROM forkq_jobs INDEXED BY forkq_jobs_tenant
                     WHERE queue = :queue AND status = 'ready' AND tenant > :after
                     ORDER BY tenant LIMIT 1)
      UNION ALL
      SELECT * FROM (SELECT tenant, 0 AS walk FROM forkq_jobs INDEXED BY forkq_jobs_status
                     WHERE status = 'ready' AND queue = :queue
                     ORDER BY run_at DESC LIMIT 1)) AS d
LEFT JOIN forkq_tenants t ON t.queue = :queue AND t.tenant = d.tenant;

-- name: fair_add_tenant
INSERT OR IGNORE INTO forkq_tenants (queue, tenant) VALUES (:queue, :tenant);

-- name: fair_turn
SELECT t.tenant,
       CASE WHEN j.id IS NULL THEN
         (SELECT 1 FROM forkq_jobs e INDEXED BY forkq_jobs_tenant
          WHERE e.queue = t.queue AND e.status = 'ready' AND e.tenant = t.tenant LIMIT 1)
       ELSE 1 END AS any_ready,
       j.id, j.handler, j.payload, j.priority, j.attempts, j.max_attempts, j.unique_key,
       j.limit_key, j.batch_id, j.run_at AS run_at_s, j.enqueued_at AS enqueued_at_s
FROM forkq_tenants t INDEXED BY forkq_tenants_turn
LEFT JOIN forkq_jobs j
  ON j.id = (SELECT h.id FROM forkq_jobs h INDEXED BY forkq_jobs_tenant
             WHERE h.queue = t.queue AND h.status = 'ready' AND h.tenant = t.tenant
               AND h.run_at <= :now
             ORDER BY h.priority DESC, h.run_at, h.id
             LIMIT 1)
WHERE t.queue = :queue
ORDER BY t.last_served, t.tenant
LIMIT :limit;

-- name: fair_served
UPDATE forkq_tenants SET last_served = CAST(:now * 1000000 AS INTEGER)
WHERE queue = :queue AND tenant IN (SELECT value FROM json_each(:names));

-- name: fair_weigh
UPDATE forkq_tenants
SET last_served = CASE WHEN served + 1 >= :weight THEN CAST(:now * 1000000 AS INTEGER)
                       ELSE last_served END,
    served = CASE WHEN served + 1 >= :weight THEN 0 ELSE served + 1 END
WHERE queue = :queue AND tenant IN (SELECT value FROM json_each(:names));

-- name: fair_busy
SELECT DISTINCT tenant FROM forkq_jobs INDEXED BY forkq_jobs_status
WHERE status IN ('running', 'cancelling') AND queue = :queue
  AND tenant IN (SELECT value FROM json_each(:names));

-- name: fair_forget
DELETE FROM forkq_tenants
WHERE queue = :queue AND tenant IN (SELECT value FROM json_each(:names));

-- name: fair_skip
UPDATE forkq_tenants SET last_served = CAST(:now * 1000000 AS INTEGER)
WHERE queue = :queue AND tenant IN (SELECT value FROM json_each(:names));

-- dependencies ----------------------------------------------------------------------------
-- depends_on (see mysql.sql and supervisor/store/dependencies.py). Every write runs under
-- BEGIN IMMEDIATE: one writer at a time, so a release is exact without row locks.

-- name: deps_complete_delete
DELETE FROM forkq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('running', 'cancelling') AND locked_by = :owner
  AND (deps & :skip) = 0;

-- name: deps_complete_keep
UPDATE forkq_jobs
SET last_error = CASE WHEN status = 'cancelling' THEN NULL ELSE last_error END,
    status = 'done', finished_at = :now, started_at = COALESCE(started_at, :now),
    locked_by = NULL, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('running', 'cancelling') AND locked_by = :owner
  AND (deps & :skip) = 0;

-- name: deps_complete_archive_copy
INSERT INTO forkq_jobs_archive
  (id, queue, handler, payload, status, priority, run_at, attempts, max_attempts, unique_key,
   locked_by, locked_until, last_error, enqueued_at, started_at, finished_at, archived_at)
SELECT id, queue, handler, payload, 'done', priority, run_at, attempts, max_attempts, unique_key,
       locked_by, NULL, CASE WHEN status = 'cancelling' THEN NULL ELSE last_error END, enqueued_at, COALESCE(started_at, :now), :now, :now
FROM forkq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('running', 'cancelling') AND locked_by = :owner
  AND (deps & :skip) = 0;

-- name: deps_fail_dead
UPDATE forkq_jobs
SET status = 'dead', finished_at = :now, started_at = COALESCE(started_at, :now),
    last_error = :error,
    locked_by = NULL, locked_until = NULL, max_attempts = COALESCE(:max_attempts, max_attempts)
WHERE id = :id AND status = 'running' AND locked_by = :owner
  AND (:only_expired = 0 OR locked_until < :now) AND (deps & :skip) = 0;

-- name: deps_held
SELECT id FROM forkq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND status IN ('running', 'cancelling') AND locked_by = :owner ORDER BY id;

-- name: deps_lock_parents
SELECT id, status FROM forkq_jobs WHERE id IN (SELECT value FROM json_each(:ids)) ORDER BY id;

-- name: deps_flag_parents
UPDATE forkq_jobs SET deps = deps | 1 WHERE id IN (SELECT value FROM json_each(:ids));

-- name: deps_mark_child
UPDATE forkq_jobs
SET status = COALESCE(:status, status), deps = deps | 2, last_error = :error,
    finished_at = CASE WHEN :status = 'cancelled' THEN :now ELSE finished_at END
WHERE id = :id;

-- name: deps_add_edges
INSERT INTO forkq_dependencies (parent_id, child_id, on_parent_failure)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]')
FROM json_each(:edges);

-- name: deps_children
SELECT parent_id, child_id, on_parent_failure FROM forkq_dependencies
WHERE parent_id IN (SELECT value FROM json_each(:ids)) ORDER BY child_id;

-- name: deps_lock_waiting
SELECT id FROM forkq_jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'waiting' ORDER BY id;

-- name: deps_unfinished
SELECT d.child_id, COUNT(*) AS n
FROM forkq_dependencies d JOIN forkq_jobs p ON p.id = d.parent_id
WHERE d.child_id IN (SELECT value FROM json_each(:ids)) AND p.status IN ('waiting', 'ready', 'scheduled', 'running', 'cancelling')
GROUP BY d.child_id;

-- name: deps_release
UPDATE forkq_jobs
SET status = CASE WHEN run_at > :now + :ahead_us / 1000000.0 THEN 'scheduled' ELSE 'ready' END
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'waiting';

-- name: deps_cancel
UPDATE forkq_jobs
SET status = 'cancelled', finished_at = :now, last_error = :error
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'waiting';

-- name: deps_forget
-- A child's rows go when it ends (done, dead, cancelled): the table holds only what waits
-- or runs.
DELETE FROM forkq_dependencies WHERE child_id IN (SELECT value FROM json_each(:ids));

-- name: deps_sweep_top
-- The chores' sweep (DependencyOps.sweep_waiting) starts somewhere up to here.
SELECT COALESCE(MAX(child_id), 0) AS top FROM forkq_dependencies;

-- name: deps_sweep_window
-- At most :limit rows of the sweep, a range of forkq_dependencies_child: bounded
-- whatever the table holds.
SELECT child_id FROM forkq_dependencies
WHERE child_id >= :start AND child_id < :stop ORDER BY child_id LIMIT :limit;

-- name: deps_sweep_edges
-- Every parent of those children that still wait, with how it stands (NULL: gone).
SELECT d.parent_id, d.child_id, d.on_parent_failure, p.status AS parent_status
FROM forkq_dependencies d
JOIN forkq_jobs c ON c.id = d.child_id AND c.status = 'waiting'
LEFT JOIN forkq_jobs p ON p.id = d.parent_id
WHERE d.child_id IN (SELECT value FROM json_each(:ids)) ORDER BY d.child_id, d.parent_id;

-- name: deps_parents
SELECT parent_id AS id FROM forkq_dependencies WHERE child_id = :id ORDER BY parent_id;

-- name: deps_dependents
SELECT child_id AS id FROM forkq_dependencies WHERE parent_id = :id ORDER BY child_id;

-- Batches (store/batches.py; see mysql.sql). SQLite has one writer at a time, so the
-- batch row needs no lock of its own.

-- name: batch_create
INSERT INTO forkq_batches (callbacks, payload, created_at) VALUES (:callbacks, :payload, :now);

-- name: batch_last_id
SELECT last_insert_rowid() AS id;

-- name: batch_seal
UPDATE forkq_batches SET sealed = 1, total = :total WHERE id = :id AND sealed = 0;

-- name: batch_open_count
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM forkq_jobs INDEXED BY forkq_jobs_batch
  WHERE batch_id = :id AND status NOT IN ('done', 'dead', 'cancelled')
  LIMIT :limit
);

-- name: batch_members_of
-- The master, before it writes a busy child's successes (a hand-back): which of them are
-- in a batch, so the batch hook runs there too (the child knew; its ledger lists ids only).
SELECT id, batch_id FROM forkq_jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND batch_id IS NOT NULL;

-- name: batch_ready_count
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM forkq_jobs INDEXED BY forkq_jobs_batch
  WHERE batch_id = :id AND status = 'ready'
  ORDER BY id DESC
  LIMIT :limit
);

-- name: batch_lock
SELECT id, callbacks, payload, total, sealed, settled_at IS NOT NULL AS settled
FROM forkq_batches WHERE id = :id;

-- name: batch_ended
SELECT status, COUNT(*) AS n FROM forkq_jobs INDEXED BY forkq_jobs_batch
WHERE batch_id = :id GROUP BY status;

-- name: batch_settle
UPDATE forkq_batches
SET settled_at = :now, done = :done, dead = :dead, cancelled = :cancelled, fired = :fired
WHERE id = :id AND settled_at IS NULL;

-- name: batch_get
SELECT id, callbacks, payload, total, sealed, done, dead, cancelled, fired,
       created_at AS created_at_s, settled_at AS settled_at_s
FROM forkq_batches WHERE id = :id;

-- name: batch_open_list
SELECT id FROM forkq_batches INDEXED BY forkq_batches_open
WHERE settled_at IS NULL AND sealed = 1 ORDER BY id LIMIT :limit;

-- name: batch_jobs
SELECT id, handler, status, attempts, max_attempts, last_error FROM forkq_jobs INDEXED BY forkq_jobs_batch
WHERE batch_id = :id ORDER BY id LIMIT :limit;

-- Schema upgrades: `upgrade_to_N` runs once on a database at version N-1 (`forkq schema apply`).
-- Each holds everything version N adds, one statement a line ending in `;`, and records
-- version N last (`forkq schema print --upgrade-from M` prints exactly these).

-- name: upgrade_to_2
-- Version 2 drops the lease index: expired leases are found through forkq_jobs_status.
DROP INDEX IF EXISTS forkq_jobs_lease;
UPDATE forkq_schema SET version = 2, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 2;

-- name: upgrade_to_3
-- Version 3 adds the status `scheduled`. SQLite keeps no column comments (the status
-- values are listed in sqlite_schema.sql), so only the version changes.
UPDATE forkq_schema SET version = 3, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 3;

-- name: upgrade_to_4
-- Version 4 adds forkq_processes.node (see mysql.sql). Rows written before have none.
ALTER TABLE forkq_processes ADD COLUMN node TEXT NULL;
UPDATE forkq_schema SET version = 4, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 4;

-- name: upgrade_to_5
-- Version 5 adds forkq_jobs.limit_key and forkq_throughput (see mysql.sql).
ALTER TABLE forkq_jobs ADD COLUMN limit_key TEXT NULL;
CREATE TABLE IF NOT EXISTS forkq_throughput (
  minute       REAL    NOT NULL,
  queue        TEXT    NOT NULL,
  host         TEXT    NOT NULL,
  done         INTEGER NOT NULL DEFAULT 0,
  failed       INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (minute, queue, host)
);
UPDATE forkq_schema SET version = 5, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 5;

-- name: upgrade_to_6
-- Version 6 adds forkq_results (see mysql.sql): a new table and its index.
CREATE TABLE IF NOT EXISTS forkq_results (
  job_id       INTEGER PRIMARY KEY,
  queue        TEXT    NOT NULL,
  status       TEXT    NOT NULL,
  payload      TEXT    NOT NULL,
  return_value TEXT    NULL,
  errors       TEXT    NOT NULL,
  workers      TEXT    NOT NULL,
  enqueued_at  REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  started_at   REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  attempted_at REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  finished_at  REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);
CREATE INDEX IF NOT EXISTS forkq_results_finished ON forkq_results (queue, finished_at);
UPDATE forkq_schema SET version = 6, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 6;

-- name: upgrade_to_7
-- Version 7 adds forkq_jobs.snoozes and forkq_jobs.limit_wait, the index of claims under a
-- limit, and forkq_limits (see mysql.sql).
ALTER TABLE forkq_jobs ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE forkq_jobs ADD COLUMN limit_wait TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS forkq_jobs_limit
  ON forkq_jobs (status, limit_wait, queue, priority DESC, run_at, id);
CREATE TABLE IF NOT EXISTS forkq_limits (
  name          TEXT    NOT NULL,
  limit_key     TEXT    NOT NULL DEFAULT '',
  rate_slice_us INTEGER NULL,
  rate_base     INTEGER NULL,
  rate_counts   TEXT    NULL,
  running_counted INTEGER NULL, -- running jobs as last counted; NULL: never
  running_added INTEGER NOT NULL DEFAULT 0, -- claimed since that count (an upper bound with it)
  wake_at       REAL    NULL,
  updated_at    REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  PRIMARY KEY (name, limit_key)
);
CREATE INDEX IF NOT EXISTS forkq_limits_wake ON forkq_limits (wake_at);
UPDATE forkq_schema SET version = 7, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 7;

-- name: upgrade_to_8
-- Version 8 adds forkq_jobs.group_key, .tags, .progress and the generated column tenant,
-- the index of fair claims, and forkq_tenants (see mysql.sql).
ALTER TABLE forkq_jobs ADD COLUMN group_key TEXT NULL;
ALTER TABLE forkq_jobs ADD COLUMN tags TEXT NULL;
ALTER TABLE forkq_jobs ADD COLUMN progress TEXT NULL;
ALTER TABLE forkq_jobs ADD COLUMN tenant TEXT GENERATED ALWAYS AS (COALESCE(group_key, limit_key, '')) VIRTUAL;
CREATE INDEX IF NOT EXISTS forkq_jobs_tenant
  ON forkq_jobs (queue, status, tenant, priority DESC, run_at, id);
CREATE TABLE IF NOT EXISTS forkq_tenants (
  queue        TEXT    NOT NULL,
  tenant       TEXT    NOT NULL,
  last_served  INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, tenant)
);
CREATE INDEX IF NOT EXISTS forkq_tenants_turn ON forkq_tenants (queue, last_served, tenant);
UPDATE forkq_schema SET version = 8, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 8;

-- name: upgrade_to_9
-- Version 9 adds forkq_schedules (see mysql.sql).
CREATE TABLE IF NOT EXISTS forkq_schedules (
  name         TEXT    NOT NULL PRIMARY KEY,
  cron         TEXT    NOT NULL,
  handler      TEXT    NOT NULL,
  queue        TEXT    NULL,
  timezone     TEXT    NOT NULL DEFAULT 'UTC',
  payload      TEXT    NOT NULL,
  priority     INTEGER NOT NULL DEFAULT 0,
  misfire      TEXT    NOT NULL DEFAULT 'once',
  paused       INTEGER NOT NULL DEFAULT 0,
  since        REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  changed_by   TEXT    NULL,
  updated_at   REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);
UPDATE forkq_schema SET version = 9, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 9;

-- name: upgrade_to_10
-- Version 10 adds uniqueness windows and scopes (see mysql.sql): SQLite drops no UNIQUE
-- constraint in place, so forkq_jobs is rebuilt (a copy in one transaction), its id
-- sequence kept, then its indexes made again.
CREATE TABLE forkq_jobs_v10 (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  queue        TEXT    NOT NULL DEFAULT 'default',
  handler      TEXT    NOT NULL,
  payload      TEXT    NOT NULL,
  status       TEXT    NOT NULL DEFAULT 'ready', -- ready | scheduled | running | done | dead
  priority     INTEGER NOT NULL DEFAULT 0,
  run_at       REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  attempts     INTEGER NOT NULL DEFAULT 0,
  max_attempts INTEGER NULL,
  unique_key   TEXT    NULL, -- unique while it holds its key: forkq_jobs_unique
  locked_by    TEXT    NULL,
  locked_until REAL    NULL,
  last_error   TEXT    NULL,
  enqueued_at  REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  started_at   REAL    NULL,
  finished_at  REAL    NULL,
  limit_key    TEXT    NULL, -- the bucket of a [limits.NAME] with per_key
  snoozes      INTEGER NOT NULL DEFAULT 0, -- Snooze requests, never attempts
  limit_wait   TEXT    NOT NULL DEFAULT '', -- the limit bucket a ready job is parked on
  group_key    TEXT    NULL, -- its tenant in a fair pool; NULL: the limit_key is
  tenant       TEXT    GENERATED ALWAYS AS (COALESCE(group_key, limit_key, '')) VIRTUAL,
  -- the window of its unique_key in seconds (NULL: none); the states that hold it (NULL:
  -- kept); later enqueues of its key that conflicted with it; the window its key holds
  -- while its state holds it, else NULL (generated: never written)
  unique_for   INTEGER NULL,
  unique_while TEXT    NULL CHECK (unique_while IN ('queued', 'active', 'kept')),
  duplicates   INTEGER NOT NULL DEFAULT 0,
  unique_live  INTEGER GENERATED ALWAYS AS (CASE WHEN unique_key IS NULL THEN NULL WHEN unique_while = 'queued' AND status NOT IN ('scheduled', 'ready', 'waiting') THEN NULL WHEN unique_while = 'active' AND status NOT IN ('scheduled', 'ready', 'waiting', 'running', 'cancelling') THEN NULL WHEN unique_for > 0 THEN CAST(enqueued_at / unique_for AS INTEGER) ELSE 0 END) VIRTUAL,
  tags         TEXT    NULL, -- JSON list of strings given at enqueue; NULL: none
  progress     TEXT    NULL -- JSON: percent, message, at
);
INSERT INTO forkq_jobs_v10 (id, queue, handler, payload, status, priority, run_at, attempts, max_attempts, unique_key, locked_by, locked_until, last_error, enqueued_at, started_at, finished_at, limit_key, snoozes, limit_wait, group_key, tags, progress)
SELECT id, queue, handler, payload, status, priority, run_at, attempts, max_attempts, unique_key, locked_by, locked_until, last_error, enqueued_at, started_at, finished_at, limit_key, snoozes, limit_wait, group_key, tags, progress FROM forkq_jobs;
UPDATE sqlite_sequence SET seq = (SELECT seq FROM sqlite_sequence WHERE name = 'forkq_jobs')
WHERE name = 'forkq_jobs_v10';
DROP TABLE forkq_jobs;
ALTER TABLE forkq_jobs_v10 RENAME TO forkq_jobs;
CREATE INDEX IF NOT EXISTS forkq_jobs_claim ON forkq_jobs (queue, status, priority DESC, run_at, id);
CREATE INDEX IF NOT EXISTS forkq_jobs_status ON forkq_jobs (status, queue, run_at);
CREATE INDEX IF NOT EXISTS forkq_jobs_finished ON forkq_jobs (finished_at);
CREATE INDEX IF NOT EXISTS forkq_jobs_limit
  ON forkq_jobs (status, limit_wait, queue, priority DESC, run_at, id);
CREATE INDEX IF NOT EXISTS forkq_jobs_tenant
  ON forkq_jobs (queue, status, tenant, priority DESC, run_at, id);
CREATE UNIQUE INDEX IF NOT EXISTS forkq_jobs_unique ON forkq_jobs (unique_key, unique_live);
UPDATE forkq_schema SET version = 10, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 10;
-- name: upgrade_to_14
-- Version 14 adds dependencies: forkq_jobs.deps and forkq_dependencies (see mysql.sql).
ALTER TABLE forkq_jobs ADD COLUMN deps INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS forkq_dependencies (
  parent_id    INTEGER NOT NULL,
  child_id     INTEGER NOT NULL,
  on_parent_failure TEXT NOT NULL DEFAULT 'cancel',
  PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX IF NOT EXISTS forkq_dependencies_child ON forkq_dependencies (child_id);
UPDATE forkq_schema SET version = 14, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 14;
-- name: upgrade_to_19
-- Version 19 drops MariaDB's forkq_jobs_claim (its claims read forkq_jobs_limit): here,
-- where forkq_jobs_limit is partial (ready jobs only), it records the version.
UPDATE forkq_schema SET version = 19, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 19;
-- name: upgrade_to_18
-- Version 18 moves MariaDB's forkq_jobs_limit, _tenant and _batch onto virtual columns
-- (SQLite has partial indexes instead): here the same columns, never indexed or read, so
-- both backends have one set of columns.
ALTER TABLE forkq_jobs ADD COLUMN ready_wait TEXT GENERATED ALWAYS AS (CASE WHEN status = 'ready' THEN limit_wait END) VIRTUAL;
ALTER TABLE forkq_jobs ADD COLUMN ready_tenant TEXT GENERATED ALWAYS AS (CASE WHEN status = 'ready' THEN COALESCE(group_key, limit_key, '') END) VIRTUAL;
ALTER TABLE forkq_jobs ADD COLUMN batch_status TEXT GENERATED ALWAYS AS (CASE WHEN batch_id IS NOT NULL THEN status END) VIRTUAL;
UPDATE forkq_schema SET version = 18, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 18;
-- name: upgrade_to_17
-- Version 17 makes forkq_jobs_unique partial (jobs with a key only): every claim and end
-- changes unique_live's inputs, so each rewrote the entry of a job without a key. And
-- forkq_jobs_limit (ready jobs only, all its queries read): each claim and end rewrote it.
DROP INDEX IF EXISTS forkq_jobs_unique;
CREATE UNIQUE INDEX IF NOT EXISTS forkq_jobs_unique ON forkq_jobs (unique_key, unique_live)
  WHERE unique_key IS NOT NULL;
DROP INDEX IF EXISTS forkq_jobs_limit;
CREATE INDEX IF NOT EXISTS forkq_jobs_limit
  ON forkq_jobs (status, limit_wait, queue, priority DESC, run_at, id) WHERE status = 'ready';
UPDATE forkq_schema SET version = 17, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 17;
-- name: upgrade_to_16
-- Version 16 makes forkq_jobs_tenant partial (ready jobs only): it had every job of every
-- state, so each claim and end rewrote an entry only fair claims read (a ready one).
-- Running and cancelling jobs of a tenant are found through forkq_jobs_status.
DROP INDEX IF EXISTS forkq_jobs_tenant;
CREATE INDEX IF NOT EXISTS forkq_jobs_tenant
  ON forkq_jobs (queue, tenant, priority DESC, run_at, id) WHERE status = 'ready';
UPDATE forkq_schema SET version = 16, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 16;
-- name: upgrade_to_15
-- Version 15 adds forkq_tenants.served (see mysql.sql).
ALTER TABLE forkq_tenants ADD COLUMN served INTEGER NOT NULL DEFAULT 0;
UPDATE forkq_schema SET version = 15, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 15;
-- name: upgrade_to_13
-- Version 13 adds batches (see mysql.sql).
CREATE TABLE IF NOT EXISTS forkq_batches (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  callbacks    TEXT    NOT NULL, -- JSON: the handler and queue of each callback, by event
  payload      TEXT    NOT NULL, -- JSON given to every callback job
  total        INTEGER NOT NULL DEFAULT 0,
  sealed       INTEGER NOT NULL DEFAULT 0, -- 1 once its with-block ended
  created_at   REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  settled_at   REAL    NULL, -- NULL: still open
  done         INTEGER NULL,
  dead         INTEGER NULL,
  cancelled    INTEGER NULL,
  fired        TEXT    NULL -- JSON: the id of each callback job enqueued, by event
);
CREATE INDEX IF NOT EXISTS forkq_batches_open ON forkq_batches (settled_at, id);
ALTER TABLE forkq_jobs ADD COLUMN batch_id INTEGER NULL;
-- Partial: a job in no batch has no entry, so its claim and end write no more than before.
CREATE INDEX IF NOT EXISTS forkq_jobs_batch ON forkq_jobs (batch_id, status)
  WHERE batch_id IS NOT NULL;
UPDATE forkq_schema SET version = 13, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 13;
-- name: upgrade_to_11
-- Version 11 adds forkq_handler_stats (see mysql.sql)
CREATE TABLE IF NOT EXISTS forkq_handler_stats (
  minute       REAL    NOT NULL, -- the minute the attempts ended in (epoch seconds)
  handler      TEXT    NOT NULL,
  host         TEXT    NOT NULL,
  jobs         INTEGER NOT NULL DEFAULT 0,
  failed       INTEGER NOT NULL DEFAULT 0,
  seconds      REAL    NOT NULL DEFAULT 0,
  fastest      REAL    NULL,
  slowest      REAL    NULL,
  b00          INTEGER NOT NULL DEFAULT 0,
  b01          INTEGER NOT NULL DEFAULT 0,
  b02          INTEGER NOT NULL DEFAULT 0,
  b03          INTEGER NOT NULL DEFAULT 0,
  b04          INTEGER NOT NULL DEFAULT 0,
  b05          INTEGER NOT NULL DEFAULT 0,
  b06          INTEGER NOT NULL DEFAULT 0,
  b07          INTEGER NOT NULL DEFAULT 0,
  b08          INTEGER NOT NULL DEFAULT 0,
  b09          INTEGER NOT NULL DEFAULT 0,
  b10          INTEGER NOT NULL DEFAULT 0,
  b11          INTEGER NOT NULL DEFAULT 0,
  b12          INTEGER NOT NULL DEFAULT 0,
  b13          INTEGER NOT NULL DEFAULT 0,
  b14          INTEGER NOT NULL DEFAULT 0,
  b15          INTEGER NOT NULL DEFAULT 0,
  b16          INTEGER NOT NULL DEFAULT 0,
  b17          INTEGER NOT NULL DEFAULT 0,
  b18          INTEGER NOT NULL DEFAULT 0,
  b19          INTEGER NOT NULL DEFAULT 0,
  b20          INTEGER NOT NULL DEFAULT 0,
  b21          INTEGER NOT NULL DEFAULT 0,
  b22          INTEGER NOT NULL DEFAULT 0,
  b23          INTEGER NOT NULL DEFAULT 0, -- bNN: attempts of 2^(NN-1) to 2^NN ms
  PRIMARY KEY (minute, handler, host)
);
CREATE INDEX IF NOT EXISTS forkq_handler_stats_handler ON forkq_handler_stats (handler, minute);
UPDATE forkq_schema SET version = 11, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 11;
-- name: upgrade_to_12
-- Version 12 adds forkq_attempts (see mysql.sql).
CREATE TABLE IF NOT EXISTS forkq_attempts (
  job_id       INTEGER NOT NULL, -- the job this attempt was of
  slot         INTEGER NOT NULL, -- attempt modulo 20: the last 20 attempts are kept
  attempt      INTEGER NOT NULL,
  queue        TEXT    NOT NULL,
  outcome      TEXT    NOT NULL, -- retry | dead | timeout | died | lease_expired
  worker       TEXT    NULL,
  host         TEXT    NULL,
  pid          INTEGER NULL,
  error        TEXT    NULL,
  started_at   REAL    NULL,
  ended_at     REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  PRIMARY KEY (job_id, slot)
);
CREATE INDEX IF NOT EXISTS forkq_attempts_ended ON forkq_attempts (queue, ended_at);
UPDATE forkq_schema SET version = 12, applied_at = (julianday('now') - 2440587.5) * 86400.0
WHERE id = 1 AND version < 12;
