-- forkq named queries for MySQL 8.0+ / MariaDB 10.6+ (PyMySQL, %(name)s parameters).
-- Every statement binds its values; `IN %(ids)s` takes a tuple, which PyMySQL escapes
-- element by element. Sessions run with time_zone '+00:00'; durations come in
-- microseconds (`*_us`) and are added to the database clock, so hosts with skewed
-- clocks still agree on "due".
--
-- A statement on a list of job ids (`id IN %(ids)s AND status ...`) forces the primary
-- key: on a small table the optimizer picks forkq_jobs_status for the status predicate,
-- and a locking statement then scans (and waits on) other workers' rows of that status.
-- A DELETE takes an index hint only in its multi-table form (`DELETE j FROM ... AS j`).

-- name: server_version
SELECT VERSION() AS version;

-- name: connection_database
-- The database a caller's connection uses (routing.py checks connection= enqueues).
SELECT DATABASE() AS name;

-- name: session_setup
-- Every session's first round trip after PyMySQL's own SET NAMES (the driver's
-- init_command would be one more of its own). Times in UTC; forkq's own
-- sessions take no gap locks: a claim, a promotion or an ack never makes an application's
-- INSERT wait, nor deadlocks with one (REPEATABLE READ locks the gaps an index scan
-- passes; each statement forkq runs is a keyed or single-row change needing nothing
-- stronger); and is the server a Galera node (`packs`)? The last result is that answer.
-- The daemon's sessions (`seconds` set) are ended by the server when idle that long, so
-- those of a host that vanished (no FIN ever arrives) do not stay open for the default 8
-- hours; a producer's (NULL) keep the server's default.
SET SESSION wait_timeout = COALESCE(%(seconds)s, @@GLOBAL.wait_timeout);
SET time_zone = '+00:00';
SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;
SHOW VARIABLES LIKE 'wsrep_on';

-- name: db_now
SELECT UNIX_TIMESTAMP(NOW(6)) AS now;

-- name: galera_state
-- A Galera node's readiness, read on connecting when `[database] nodes` is set (see
-- store/galera.py): no rows from a server that is not a Galera node.
SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_local_state_comment');

-- name: max_allowed_packet
-- The longest statement this session may send, in bytes (read-only within a session).
SELECT @@SESSION.max_allowed_packet AS bytes;

-- name: schema_version
SELECT version FROM forkq_schema WHERE id = 1;

-- name: set_schema_version
INSERT INTO forkq_schema (id, version) VALUES (1, %(version)s)
ON DUPLICATE KEY UPDATE version = VALUES(version), applied_at = NOW(6);

-- name: insert_job
-- A job to run now, without a unique key: run_at takes its default (the server's clock).
-- As cheap as the bare INSERT of SPEC.md; the run_at expression below costs the server
-- about 10% of an insert.
INSERT INTO forkq_jobs (queue, handler, payload, priority, max_attempts)
VALUES (%(queue)s, %(handler)s, %(payload)s, %(priority)s, %(max_attempts)s);

-- name: insert_job_at
-- A delayed job (or one with a run_at), without a unique key. One due later than the
-- promotion horizon is stored `scheduled`, out of the claim's range (status reads the
-- run_at set just before it in the same row: MySQL and MariaDB evaluate left to right).
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, max_attempts)
VALUES (%(queue)s, %(handler)s, %(payload)s, %(priority)s,
        COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
        IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
        %(max_attempts)s);

-- name: insert_job_unique
-- With a unique key (any run_at, limit_key, group_key or tags): every column named. It
-- conflicts with the job whose (unique_key, unique_live) it would repeat: the job that
-- holds the key in this window (unique_for) and state (unique_while). The conflict always
-- changes that row (duplicates + 1), so the affected-row count tells it (1: inserted, 2:
-- conflicted), with or without CLIENT_FOUND_ROWS, and LAST_INSERT_ID gives its id.
-- replace and debounce change a job that still waits (payload; debounce also run_at, never
-- earlier and at most debounce_max past its enqueue); a running or finished one is left.
-- Assignments run left to right: status reads the run_at set just before it.
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts,
                        limit_key, group_key, tags, unique_for, unique_while)
VALUES (%(queue)s, %(handler)s, %(payload)s, %(priority)s,
        COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
        IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
        %(unique_key)s, %(max_attempts)s, %(limit_key)s, %(group_key)s, %(tags)s,
        %(unique_for)s, %(unique_while)s)
ON DUPLICATE KEY UPDATE
  payload = IF(%(replace)s AND status IN ('scheduled', 'ready', 'waiting'), VALUES(payload), payload),
  run_at = IF(%(debounce)s AND status IN ('scheduled', 'ready', 'waiting'),
              GREATEST(run_at, IF(%(debounce_max_us)s IS NULL, VALUES(run_at),
                                  LEAST(VALUES(run_at), enqueued_at + INTERVAL %(debounce_max_us)s MICROSECOND))),
              run_at),
  status = IF(%(debounce)s AND status IN ('scheduled', 'ready'),
              IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'), status),
  duplicates = LEAST(duplicates, 2147483646) + 1,
  id = LAST_INSERT_ID(id);

-- name: insert_jobs_head
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts) VALUES;

-- name: insert_jobs_row
(%(queue)s, %(handler)s, %(payload)s, %(priority)s,
 COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
 IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
 %(unique_key)s, %(max_attempts)s);

-- name: insert_jobs_tail
ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id) RETURNING id;

-- name: claim_select
-- Ready jobs of the queue in claim order, from forkq_jobs_limit: its range ready_wait = ''
-- holds the ready jobs no limit holds back, which is every ready job of a queue without
-- [limits] (jobs parked on a limit that is gone are let go by the chores, upkeep.py).
-- Since version 19 it is the only index of ready jobs in claim order: each index whose
-- entry a claim moves costs the server a delete-mark, an insert and a purge per job.
-- Only `ready` rows are in the range: jobs due later wait as `scheduled` (promote_select),
-- so the scan reads and locks about `limit` rows however many jobs wait for later. The
-- session runs READ COMMITTED: no gap locks, so a claim never blocks an enqueue.
-- The index is forced: with a range on run_at the optimizer may pick forkq_jobs_status
-- and sort the whole backlog for every batch.
-- Only what a worker needs, and every number in one column, `numbers` (store/mysql_claims.py
-- reads it): each column costs the client decoding per job, a DATETIME the most.
SELECT CONCAT_WS(' ', id, priority, attempts, IFNULL(max_attempts, '-'), IFNULL(batch_id, '-'),
                 IFNULL(UNIX_TIMESTAMP(run_at), '-'), IFNULL(UNIX_TIMESTAMP(enqueued_at), '-'))
         AS numbers, handler, payload, unique_key
FROM forkq_jobs FORCE INDEX (forkq_jobs_limit)
WHERE ready_wait = '' AND queue = %(queue)s AND run_at <= NOW(6) AND status = 'ready'
ORDER BY priority DESC, run_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: claim_update
-- attempts stops one short of INT's top: a raw row holding the largest INT is claimed
-- (and ends as its max_attempts says), never a claim that fails for ever (1264).
-- The first job of the batch starts now; the others are claimed but not started
-- (started_at NULL: never shown or counted as running). The master marks a held job's
-- start (mark_started) once it has run past the hand-back grace; a quick one is done
-- before anyone looks.
UPDATE forkq_jobs
SET status = 'running', locked_by = %(owner)s, attempts = LEAST(attempts, 2147483646) + 1,
    started_at = IF(id = %(first)s, NOW(6), NULL),
    locked_until = NOW(6) + INTERVAL %(lease_us)s MICROSECOND
WHERE id IN %(ids)s;

-- name: mark_started
-- The master, for a job a child claimed behind another and then ran past the hand-back
-- grace: its start, `ago_us` before now (the child's own clock said when).
UPDATE forkq_jobs SET started_at = NOW(6) - INTERVAL %(ago_us)s MICROSECOND
WHERE id = %(id)s AND status IN ('running', 'cancelling') AND locked_by = %(owner)s
  AND started_at IS NULL;

-- name: extend_leases
UPDATE forkq_jobs FORCE INDEX (PRIMARY) SET locked_until = NOW(6) + INTERVAL %(lease_us)s MICROSECOND
WHERE id IN %(ids)s AND status = 'running' AND locked_by = %(owner)s;

-- name: complete_delete
-- Also a `cancelling` job: its handler succeeded before the cancel reached it.
DELETE j FROM forkq_jobs AS j FORCE INDEX (PRIMARY) WHERE id IN %(ids)s AND status IN ('running', 'cancelling') AND locked_by = %(owner)s;

-- name: complete_keep
-- A `cancelling` job too (its handler returned before the kill): done, and the cancel's
-- words are not its last error. last_error is set first: MySQL reads a column set earlier
-- in the same SET as its new value.
UPDATE forkq_jobs FORCE INDEX (PRIMARY)
SET last_error = CASE WHEN status = 'cancelling' THEN NULL ELSE last_error END,
    status = 'done', finished_at = NOW(6), started_at = COALESCE(started_at, NOW(6)),
    locked_by = NULL, locked_until = NULL
WHERE id IN %(ids)s AND status IN ('running', 'cancelling') AND locked_by = %(owner)s;

-- name: complete_archive_copy
INSERT INTO forkq_jobs_archive
  (id, queue, handler, payload, status, priority, run_at, attempts, max_attempts, unique_key,
   locked_by, locked_until, last_error, enqueued_at, started_at, finished_at)
SELECT id, queue, handler, payload, 'done', priority, run_at, attempts, max_attempts, unique_key,
       locked_by, NULL, CASE WHEN status = 'cancelling' THEN NULL ELSE last_error END, enqueued_at, COALESCE(started_at, NOW(6)), NOW(6)
FROM forkq_jobs FORCE INDEX (PRIMARY) WHERE id IN %(ids)s AND status IN ('running', 'cancelling') AND locked_by = %(owner)s;

-- name: fail_retry
-- `status` is 'scheduled' when the backoff reaches past the promotion horizon.
-- IGNORE: a job whose unique key another job took while it ran (schema 10) is left
-- running, never an error; the caller then ends it superseded (held_unique, supersede).
UPDATE IGNORE forkq_jobs
SET status = %(status)s, run_at = NOW(6) + INTERVAL %(delay_us)s MICROSECOND, last_error = %(error)s,
    locked_by = NULL, locked_until = NULL, max_attempts = COALESCE(%(max_attempts)s, max_attempts)
WHERE id = %(id)s AND status = 'running' AND locked_by = %(owner)s
  AND (%(only_expired)s = 0 OR locked_until < NOW(6));

-- name: fail_dead
UPDATE forkq_jobs
SET status = 'dead', finished_at = NOW(6), started_at = COALESCE(started_at, NOW(6)),
    last_error = %(error)s,
    locked_by = NULL, locked_until = NULL, max_attempts = COALESCE(%(max_attempts)s, max_attempts)
WHERE id = %(id)s AND status = 'running' AND locked_by = %(owner)s
  AND (%(only_expired)s = 0 OR locked_until < NOW(6));

-- name: release
-- IGNORE: a job whose unique key another job took meanwhile (schema 10) is left
-- running, never an error; the caller then ends it superseded (held_unique, supersede).
UPDATE IGNORE forkq_jobs FORCE INDEX (PRIMARY)
SET status = 'ready', attempts = GREATEST(attempts - %(uncount)s, 0), locked_by = NULL, locked_until = NULL
WHERE id IN %(ids)s AND status = 'running' AND locked_by = %(owner)s
  AND (%(only_expired)s = 0 OR locked_until < NOW(6));

-- name: held_unique
-- Jobs with a unique key that a move back into the queue (fail_retry, snooze, release)
-- left running for this owner: the database ignored it, another job holds their key.
SELECT id, unique_key FROM forkq_jobs FORCE INDEX (PRIMARY)
WHERE id IN %(ids)s AND status = 'running' AND locked_by = %(owner)s AND unique_key IS NOT NULL
  AND (%(only_expired)s = 0 OR locked_until < NOW(6))
  AND (%(max_snoozes)s IS NULL OR snoozes < %(max_snoozes)s);

-- name: supersede
-- A job whose move back into the queue collided with the holder of its unique key yields
-- to it: it ends cancelled (its children and batch are settled as any cancel's).
UPDATE forkq_jobs
SET status = 'cancelled', finished_at = NOW(6), last_error = %(error)s,
    locked_by = NULL, locked_until = NULL
WHERE id = %(id)s AND status = 'running' AND locked_by = %(owner)s;

-- name: held_by
-- What one worker holds (the master, each time a child exits): the running range of the
-- status index, sorted. Forced: during a drain that range is full of delete-marked
-- entries, the optimizer then guessed it large and read the whole table in id order
-- instead (90 ms at 25,000 rows, for every recycled child, in the master's loop).
SELECT * FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE status IN ('running', 'cancelling') AND locked_by = %(owner)s ORDER BY id;

-- name: expired_leases
-- Running rows are few (workers x claim batch per host): the status index finds them
-- all, so locked_until needs no index of its own (one less index to write per claim).
-- Forced, as held_by: the range's estimate counts delete-marked entries. A row with no
-- lease at all is a raw INSERT's (forkq writes none): it comes first, and ends dead.
SELECT * FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE (locked_until < NOW(6) OR locked_until IS NULL) AND status IN ('running', 'cancelling')
ORDER BY locked_until LIMIT %(limit)s;

-- name: unleased_bury
UPDATE forkq_jobs
SET status = 'dead', finished_at = NOW(6), last_error = %(error)s, locked_by = NULL
WHERE id = %(id)s AND status = 'running' AND locked_until IS NULL;

-- name: cancelling_jobs
-- The master's once-a-second look for cancel requests: cancelling rows are few, found
-- through the status index; each master keeps those its children hold.
SELECT id, locked_by FROM forkq_jobs WHERE status = 'cancelling' LIMIT %(limit)s;

-- name: finish_cancel_select
-- The cancelling row as its holder left it (attempt, holder, start, who cancelled it),
-- locked until finish_cancel ends it: its attempt goes into forkq_attempts as `cancelled`.
SELECT * FROM forkq_jobs WHERE id = %(id)s AND status = 'cancelling' FOR UPDATE;

-- name: finish_cancel
-- Its holder was killed (or is gone): the cancelling job ends cancelled, never retried.
UPDATE forkq_jobs
SET status = 'cancelled', finished_at = NOW(6), locked_by = NULL, locked_until = NULL
WHERE id = %(id)s AND status = 'cancelling';

-- name: due_queues
-- The master's poll: three index dives per queue on forkq_jobs_status, so its cost does
-- not grow with the backlog: the earliest ready run_at (wake a child), the earliest
-- scheduled one (promote), the latest ready one (a raw INSERT far ahead: demote).
-- The queue list is bound as one JSON array.
SELECT q.queue,
       TIMESTAMPDIFF(MICROSECOND, NOW(6),
         (SELECT j.run_at FROM forkq_jobs j
          WHERE j.status = 'ready' AND j.queue = q.queue ORDER BY j.run_at LIMIT 1)) AS wait_us,
       TIMESTAMPDIFF(MICROSECOND, NOW(6),
         (SELECT j.run_at FROM forkq_jobs j
          WHERE j.status = 'scheduled' AND j.queue = q.queue ORDER BY j.run_at LIMIT 1)) AS scheduled_us,
       TIMESTAMPDIFF(MICROSECOND, NOW(6),
         (SELECT j.run_at FROM forkq_jobs j
          WHERE j.status = 'ready' AND j.queue = q.queue ORDER BY j.run_at DESC LIMIT 1)) AS last_us
FROM JSON_TABLE(%(queues)s, '$[*]'
       COLUMNS (queue VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS q;

-- name: promote_select
-- Scheduled jobs due within the horizon become ready (the claim still waits for run_at,
-- so a job is never early). SKIP LOCKED: two hosts promoting at once split the rows.
SELECT id FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE status = 'scheduled' AND queue = %(queue)s
  AND run_at <= NOW(6) + INTERVAL %(ahead_us)s MICROSECOND
ORDER BY run_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: promote_update
UPDATE forkq_jobs FORCE INDEX (PRIMARY) SET status = 'ready' WHERE id IN %(ids)s AND status = 'scheduled';

-- name: untimed_select
-- Jobs whose run_at is no time, which never fall due: SQLite keeps a raw INSERT's text
-- there (sqlite.sql). A TIMESTAMP NOT NULL always holds a time (the server converts or
-- refuses text): the optimizer reads this WHERE as impossible and reads no row.
SELECT id FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE status IN ('ready', 'scheduled') AND queue = %(queue)s AND run_at IS NULL
LIMIT %(limit)s;

-- name: untimed_bury
UPDATE forkq_jobs
SET status = 'dead', finished_at = NOW(6), last_error = %(error)s, locked_by = NULL, locked_until = NULL
WHERE id IN %(ids)s AND status IN ('ready', 'scheduled');

-- name: demote_select
-- Ready rows far in the future (a raw INSERT with a run_at ahead: the column defaults to
-- ready) move out of the claim's range, the latest first.
SELECT id FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE status = 'ready' AND queue = %(queue)s
  AND run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND
ORDER BY run_at DESC
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: demote_update
UPDATE forkq_jobs FORCE INDEX (PRIMARY) SET status = 'scheduled' WHERE id IN %(ids)s AND status = 'ready';

-- name: count_ready
-- Due jobs a claim could take now, not those parked on a full limit's bucket: more
-- workers would not start those sooner, so they grow no pool and saturate none. The
-- claim's index: its range ready_wait = '' holds only the others.
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM forkq_jobs FORCE INDEX (forkq_jobs_limit)
  WHERE ready_wait = '' AND queue = %(queue)s AND run_at <= NOW(6) LIMIT %(cap)s) AS due;

-- name: stats_first_queue
-- `forkq status` and the check tick never scan the jobs table: queue names come from a
-- loose index scan on forkq_jobs_tenant (queue first), one dive per name. This is the
-- first name; stats_queue gives the next one. (A recursive CTE cannot do the walk:
-- MariaDB runs its correlated `queue > previous` as a full index scan per step.)
SELECT MIN(queue) AS queue FROM forkq_jobs;

-- name: stats_queue
-- One queue in one round trip, every figure an index range of forkq_jobs_status
-- (status, queue, run_at) that stops after %(limit)s entries (the caller's cap + 1, so
-- it can tell a capped count), or a single dive: the oldest due run_at and the next
-- queue name. Its cost is flat however many rows the table holds. The status index is
-- forced for ready rows: in forkq_jobs_limit, priority sits before run_at and due rows
-- are not one range. Counts no alert rule reads (not due yet, scheduled, running, done, cancelled)
-- stop at %(minor_limit)s instead: the check tick keeps those small. Running counts a
-- cancelling job too: its handler runs until its host stops it.
SELECT
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
     WHERE status = 'ready' AND queue = %(queue)s AND run_at <= NOW(6) LIMIT %(limit)s) AS c) AS ready,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
     WHERE status = 'ready' AND queue = %(queue)s AND run_at > NOW(6) LIMIT %(minor_limit)s) AS c) AS ready_later,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'scheduled' AND queue = %(queue)s LIMIT %(minor_limit)s) AS c) AS scheduled,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
     WHERE status IN ('running', 'cancelling') AND queue = %(queue)s AND started_at IS NOT NULL
     LIMIT %(minor_limit)s) AS c) AS running,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'dead' AND queue = %(queue)s LIMIT %(limit)s) AS c) AS dead,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'done' AND queue = %(queue)s LIMIT %(minor_limit)s) AS c) AS done,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'waiting' AND queue = %(queue)s LIMIT %(minor_limit)s) AS c) AS waiting,
  (SELECT COUNT(*) FROM (SELECT 1 FROM forkq_jobs
     WHERE status = 'cancelled' AND queue = %(queue)s LIMIT %(minor_limit)s) AS c) AS cancelled,
  TIMESTAMPDIFF(MICROSECOND,
    (SELECT MIN(run_at) FROM forkq_jobs
     WHERE status = 'ready' AND queue = %(queue)s AND run_at <= NOW(6)), NOW(6)) AS oldest_us,
  (SELECT MIN(queue) FROM forkq_jobs WHERE queue > %(queue)s) AS next_queue;

-- name: stats_queue_exact
-- stats_queue without a cap, for `forkq status --exact` only (never on a timer): plain
-- counts of the same ranges. A derived table without a cap would copy millions of rows
-- into a temporary table (to disk past tmp_table_size).
-- The running count reads its rows (started_at), so the optimizer, counting the range's
-- delete-marked entries during a drain, chose to read the whole table: forced, as held_by.
SELECT
  (SELECT COUNT(*) FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
     WHERE status = 'ready' AND queue = %(queue)s AND run_at <= NOW(6)) AS ready,
  (SELECT COUNT(*) FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
     WHERE status = 'ready' AND queue = %(queue)s AND run_at > NOW(6)) AS ready_later,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'scheduled' AND queue = %(queue)s) AS scheduled,
  (SELECT COUNT(*) FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
     WHERE status IN ('running', 'cancelling') AND queue = %(queue)s AND started_at IS NOT NULL) AS running,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'dead' AND queue = %(queue)s) AS dead,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'done' AND queue = %(queue)s) AS done,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'waiting' AND queue = %(queue)s) AS waiting,
  (SELECT COUNT(*) FROM forkq_jobs WHERE status = 'cancelled' AND queue = %(queue)s) AS cancelled,
  TIMESTAMPDIFF(MICROSECOND,
    (SELECT MIN(run_at) FROM forkq_jobs
     WHERE status = 'ready' AND queue = %(queue)s AND run_at <= NOW(6)), NOW(6)) AS oldest_us,
  (SELECT MIN(queue) FROM forkq_jobs WHERE queue > %(queue)s) AS next_queue;

-- name: get_job
SELECT * FROM forkq_jobs WHERE id = %(id)s;

-- name: get_archived_job
SELECT * FROM forkq_jobs_archive WHERE id = %(id)s;

-- name: list_jobs_status
-- `forkq jobs --status S` when S has few jobs (counted first, count_status): the status
-- index's range, sorted, whatever the optimizer makes of list_jobs's `IS NULL OR` (SQLite
-- read the primary key backwards there: the whole table for a few old dead jobs).
SELECT * FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE status = %(status)s AND (%(queue)s IS NULL OR queue = %(queue)s)
  AND (%(status)s <> 'running' OR started_at IS NOT NULL) AND id <= %(highest)s
ORDER BY id DESC LIMIT %(limit)s;

-- name: list_jobs
SELECT * FROM forkq_jobs
WHERE (%(status)s IS NULL OR status = %(status)s) AND (%(queue)s IS NULL OR queue = %(queue)s)
  AND (%(status)s IS NULL OR %(status)s <> 'running' OR started_at IS NOT NULL)
  AND id <= %(highest)s
ORDER BY id DESC LIMIT %(limit)s;

-- name: retry_jobs
-- IGNORE: a job whose unique key another job took meanwhile (schema 10) is left as
-- it is, never an error, and not_retried says why (the job holding the key).
UPDATE IGNORE forkq_jobs FORCE INDEX (PRIMARY)
SET status = 'ready', run_at = NOW(6), attempts = 0, finished_at = NULL, locked_by = NULL, locked_until = NULL
WHERE id IN %(ids)s AND status NOT IN ('running', 'cancelling');

-- name: deps_retry_jobs
-- retry_jobs from schema 14: a waiting job is left alone (it runs once its parents are
-- done), and so is a cancelled job enqueued with parents (deps & 2): its rows of
-- forkq_dependencies went when it ended, so it could no longer wait on them.
UPDATE IGNORE forkq_jobs FORCE INDEX (PRIMARY)
SET status = 'ready', run_at = NOW(6), attempts = 0, finished_at = NULL, locked_by = NULL, locked_until = NULL
WHERE id IN %(ids)s AND status NOT IN ('running', 'cancelling', 'waiting')
  AND (status <> 'cancelled' OR (deps & 2) = 0);

-- name: deps_flags
SELECT status, deps FROM forkq_jobs WHERE id = %(id)s;

-- name: dead_ids
-- A chunk of the dead jobs (of a queue) to retry (Store.retry_dead), on the status index;
-- skip: those a retry left dead (a unique key held by another job), else they would
-- come back first in every chunk.
SELECT id FROM forkq_jobs
WHERE status = 'dead' AND (%(queue)s IS NULL OR queue = %(queue)s) AND id NOT IN %(skip)s
LIMIT %(limit)s;

-- name: dead_among
-- Which of these jobs a retry left dead: what it did not change (MySQL's found-rows
-- count includes the rows UPDATE IGNORE left alone).
SELECT id FROM forkq_jobs FORCE INDEX (PRIMARY) WHERE id IN %(ids)s AND status = 'dead';

-- name: cancel_select
-- Cancelling (Store.cancel_jobs): the jobs asked for, locked, with the status each had,
-- so the result names what happened to every one of them.
SELECT id, status FROM forkq_jobs WHERE id IN %(ids)s FOR UPDATE;

-- name: cancel_waiting
-- A job not yet running ends `cancelled` at once and is never claimed or retried.
UPDATE forkq_jobs FORCE INDEX (PRIMARY)
SET status = 'cancelled', finished_at = NOW(6), last_error = %(error)s,
    locked_by = NULL, locked_until = NULL
WHERE id IN %(ids)s AND status IN ('waiting', 'ready', 'scheduled');

-- name: cancel_running
-- A running job becomes `cancelling`: the master whose child holds it (locked_by) kills
-- the child's process group and marks it `cancelled`. The lease columns stay: they say
-- where it runs.
UPDATE forkq_jobs FORCE INDEX (PRIMARY) SET status = 'cancelling', last_error = %(error)s
WHERE id IN %(ids)s AND status = 'running';

-- name: archived_ids
SELECT id FROM forkq_jobs_archive WHERE id IN %(ids)s;

-- name: purge_finished
DELETE FROM forkq_jobs
WHERE finished_at < NOW(6) - INTERVAL %(age_us)s MICROSECOND AND status = %(status)s
  AND (%(queue)s IS NULL OR queue = %(queue)s)
LIMIT %(limit)s;

-- name: purge_archive
DELETE FROM forkq_jobs_archive
WHERE finished_at < NOW(6) - INTERVAL %(age_us)s MICROSECOND AND (%(queue)s IS NULL OR queue = %(queue)s)
LIMIT %(limit)s;

-- name: set_paused
INSERT INTO forkq_queues (queue, paused) VALUES (%(queue)s, %(paused)s)
ON DUPLICATE KEY UPDATE paused = VALUES(paused), updated_at = NOW(6);

-- name: paused_queues
SELECT queue FROM forkq_queues WHERE paused = 1;

-- name: register_process
INSERT INTO forkq_processes (name, host, pid, role, pool, master, node)
VALUES (%(name)s, %(host)s, %(pid)s, %(role)s, %(pool)s, %(master)s, %(node)s)
ON DUPLICATE KEY UPDATE heartbeat_at = NOW(6);

-- name: register_process_no_node
-- The same on a schema older than version 4, which has no `node` column.
INSERT INTO forkq_processes (name, host, pid, role, pool, master)
VALUES (%(name)s, %(host)s, %(pid)s, %(role)s, %(pool)s, %(master)s)
ON DUPLICATE KEY UPDATE heartbeat_at = NOW(6);

-- name: beat_processes
UPDATE forkq_processes SET heartbeat_at = NOW(6) WHERE name IN %(names)s;

-- name: remove_processes
DELETE FROM forkq_processes WHERE name IN %(names)s;

-- name: stale_processes
SELECT * FROM forkq_processes WHERE heartbeat_at < NOW(6) - INTERVAL %(age_us)s MICROSECOND;

-- name: list_processes
SELECT * FROM forkq_processes ORDER BY host, role, pool, pid;

-- name: lock_take
UPDATE forkq_locks
SET owner = %(owner)s, acquired_at = NOW(6), expires_at = NOW(6) + INTERVAL %(ttl_us)s MICROSECOND
WHERE name = %(name)s AND (expires_at < NOW(6) OR owner IS NULL);

-- name: lock_insert
INSERT IGNORE INTO forkq_locks (name, owner, acquired_at, expires_at)
VALUES (%(name)s, %(owner)s, NOW(6), NOW(6) + INTERVAL %(ttl_us)s MICROSECOND);

-- name: lock_renew
UPDATE forkq_locks SET expires_at = NOW(6) + INTERVAL %(ttl_us)s MICROSECOND
WHERE name = %(name)s AND owner = %(owner)s AND expires_at >= NOW(6);

-- name: lock_release
UPDATE forkq_locks SET owner = NULL, expires_at = NOW(6)
WHERE name = %(name)s AND owner = %(owner)s AND expires_at >= NOW(6);

-- name: list_locks
SELECT name, owner, acquired_at, expires_at, expires_at >= NOW(6) AS live FROM forkq_locks ORDER BY name;

-- name: insert_slot
INSERT INTO forkq_schedule_slots (schedule, slot) VALUES (%(schedule)s, FROM_UNIXTIME(%(slot)s));

-- name: set_slot_job
UPDATE forkq_schedule_slots SET job_id = %(job_id)s
WHERE schedule = %(schedule)s AND slot = FROM_UNIXTIME(%(slot)s);

-- name: last_slot
SELECT UNIX_TIMESTAMP(MAX(slot)) AS slot FROM forkq_schedule_slots WHERE schedule = %(schedule)s;

-- name: set_progress
-- What a running job's handler reports (job.progress): only while this worker holds it.
UPDATE forkq_jobs SET progress = %(progress)s
WHERE id = %(id)s AND status = 'running' AND locked_by = %(owner)s;

-- name: schedule_add
-- A schedule added at runtime; a name already added is a duplicate key (the caller says so).
INSERT INTO forkq_schedules
  (name, cron, handler, queue, timezone, payload, priority, misfire, paused, since, changed_by, updated_at)
VALUES (%(name)s, %(cron)s, %(handler)s, %(queue)s, %(timezone)s, %(payload)s, %(priority)s,
        %(misfire)s, 0, NOW(6), %(by)s, NOW(6));

-- name: schedule_pause
UPDATE forkq_schedules SET paused = 1, changed_by = %(by)s, updated_at = NOW(6)
WHERE name = %(name)s AND paused = 0;

-- name: schedule_resume
-- Slots that fell due while it was paused are not run: `since` moves to now.
UPDATE forkq_schedules SET paused = 0, since = NOW(6), changed_by = %(by)s, updated_at = NOW(6)
WHERE name = %(name)s AND paused = 1;

-- name: schedule_remove
DELETE FROM forkq_schedules WHERE name = %(name)s;

-- name: schedule_list
-- Every schedule added at runtime: a handful of rows, read once per check tick.
SELECT name, cron, handler, queue, timezone, payload, priority, misfire, paused,
       UNIX_TIMESTAMP(since) AS since, changed_by, UNIX_TIMESTAMP(updated_at) AS updated_at
FROM forkq_schedules ORDER BY name;

-- name: load_alerts
SELECT alert_key, state, detail, UNIX_TIMESTAMP(since) AS since, UNIX_TIMESTAMP(notified_at) AS notified_at
FROM forkq_alerts;

-- name: save_alert
INSERT INTO forkq_alerts (alert_key, state, detail, since, notified_at)
VALUES (%(key)s, %(state)s, %(detail)s, FROM_UNIXTIME(%(since)s), FROM_UNIXTIME(%(notified_at)s))
ON DUPLICATE KEY UPDATE state = VALUES(state), detail = VALUES(detail), since = VALUES(since),
                        notified_at = VALUES(notified_at);

-- name: result_job
-- A job as a Django task result reads it (supervisor.contrib.django), on the application's
-- own connection, whatever that session's time zone: times as epoch seconds. An archived
-- job is found too. At most one of the two tables holds the id.
SELECT id, queue, handler, payload, status, priority, attempts, last_error, locked_by,
       UNIX_TIMESTAMP(enqueued_at) AS enqueued_at, UNIX_TIMESTAMP(started_at) AS started_at,
       UNIX_TIMESTAMP(finished_at) AS finished_at
FROM forkq_jobs WHERE id = %(id)s
UNION ALL
SELECT id, queue, handler, payload, status, priority, attempts, last_error, locked_by,
       UNIX_TIMESTAMP(enqueued_at) AS enqueued_at, UNIX_TIMESTAMP(started_at) AS started_at,
       UNIX_TIMESTAMP(finished_at) AS finished_at
FROM forkq_jobs_archive WHERE id = %(id)s;

-- name: get_result
SELECT job_id, queue, status, payload, return_value, errors, workers,
       UNIX_TIMESTAMP(enqueued_at) AS enqueued_at, UNIX_TIMESTAMP(started_at) AS started_at,
       UNIX_TIMESTAMP(attempted_at) AS attempted_at, UNIX_TIMESTAMP(finished_at) AS finished_at
FROM forkq_results WHERE job_id = %(id)s;

-- name: save_result
-- One attempt's end: the row is the job's whole record so far (the caller appended this
-- attempt's error and worker to what it read), so a second write replaces the first.
INSERT INTO forkq_results (job_id, queue, status, payload, return_value, errors, workers,
                           enqueued_at, started_at, attempted_at, finished_at)
VALUES (%(id)s, %(queue)s, %(status)s, %(payload)s, %(return_value)s, %(errors)s, %(workers)s,
        FROM_UNIXTIME(%(enqueued_at)s), FROM_UNIXTIME(%(started_at)s),
        FROM_UNIXTIME(%(attempted_at)s), FROM_UNIXTIME(%(finished_at)s))
ON DUPLICATE KEY UPDATE status = VALUES(status), return_value = VALUES(return_value),
                        errors = VALUES(errors), workers = VALUES(workers),
                        started_at = VALUES(started_at), attempted_at = VALUES(attempted_at),
                        finished_at = VALUES(finished_at);

-- name: purge_results
-- Results older than the pool's retention, unless their job waits or runs again (an
-- operator's retry): those stay with the job.
DELETE FROM forkq_results
WHERE queue = %(queue)s AND finished_at < NOW(6) - INTERVAL %(age_us)s MICROSECOND
  AND NOT EXISTS (SELECT 1 FROM forkq_jobs j
                  WHERE j.id = forkq_results.job_id
                    AND j.status IN ('ready', 'scheduled', 'running', 'cancelling'))
LIMIT %(limit)s;

-- results and attempts -----------------------------------------------------------------------
-- A kept result (keep_result) and the attempts that did not end in the job's success
-- (store/results.py). Nothing here runs for a job that keeps no result and succeeds.

-- name: keep_result
-- A handler's return value, in the transaction that completes its job. The row is the one
-- the Django backend writes (forkq_results): its payload, errors and workers are kept.
INSERT INTO forkq_results (job_id, queue, status, payload, return_value, errors, workers)
VALUES (%(id)s, %(queue)s, 'succeeded', '', %(value)s, '[]', '[]')
ON DUPLICATE KEY UPDATE status = 'succeeded', return_value = VALUES(return_value),
                        finished_at = NOW(6);

-- name: job_result
SELECT job_id, status, return_value, UNIX_TIMESTAMP(finished_at) AS finished_at
FROM forkq_results WHERE job_id = %(id)s;

-- name: job_state
-- What q.wait looks at: the job's status (or its archived row's).
SELECT status FROM forkq_jobs WHERE id = %(id)s
UNION ALL
SELECT status FROM forkq_jobs_archive WHERE id = %(id)s;

-- name: record_attempt
-- started_at is the worker's clock: never after the end, the database's.
INSERT INTO forkq_attempts (job_id, slot, attempt, queue, outcome, worker, host, pid, error,
                            started_at)
VALUES (%(id)s, %(slot)s, %(attempt)s, %(queue)s, %(outcome)s, %(worker)s, %(host)s, %(pid)s,
        %(error)s, LEAST(FROM_UNIXTIME(%(started_at)s), NOW(6)))
ON DUPLICATE KEY UPDATE attempt = VALUES(attempt), queue = VALUES(queue),
  outcome = VALUES(outcome), worker = VALUES(worker), host = VALUES(host), pid = VALUES(pid),
  error = VALUES(error), started_at = VALUES(started_at), ended_at = NOW(6);

-- name: drop_older_runs
-- Store.keep_earlier_run: the runs before the last one (moved below slot 0 at a retry).
DELETE FROM forkq_attempts WHERE job_id IN %(ids)s AND slot < 0;

-- name: shift_attempts
-- The last run's attempts out of slots 0-19, which the retried run writes again.
UPDATE forkq_attempts SET slot = slot - 20 WHERE job_id IN %(ids)s;

-- name: job_attempts
SELECT attempt, outcome, worker, host, pid, error,
       UNIX_TIMESTAMP(started_at) AS started_at, UNIX_TIMESTAMP(ended_at) AS ended_at
FROM forkq_attempts WHERE job_id = %(id)s ORDER BY ended_at, attempt;

-- name: purge_attempts
-- Attempts older than the pool's retention, unless their job waits or runs again.
DELETE FROM forkq_attempts
WHERE queue = %(queue)s AND ended_at < NOW(6) - INTERVAL %(age_us)s MICROSECOND
  AND NOT EXISTS (SELECT 1 FROM forkq_jobs j
                  WHERE j.id = forkq_attempts.job_id
                    AND j.status IN ('ready', 'scheduled', 'running', 'cancelling'))
LIMIT %(limit)s;

-- web ----------------------------------------------------------------------------------------
-- The dashboard's reads and actions (supervisor/web). Each read is a primary-key dive or an
-- index range that stops at a LIMIT, so a page costs the same at 10k jobs and at 1M; no
-- OFFSET anywhere: lists page by id.

-- name: record_throughput
-- Each master adds its children's finished jobs to the current minute, per queue, every
-- heartbeat: one row per queue, minute and host, so hosts never contend on a row.
INSERT INTO forkq_throughput (minute, queue, host, done, failed)
VALUES (FROM_UNIXTIME(%(minute)s), %(queue)s, %(host)s, %(done)s, %(failed)s)
ON DUPLICATE KEY UPDATE done = done + VALUES(done), failed = failed + VALUES(failed);

-- name: prune_throughput
DELETE FROM forkq_throughput WHERE minute < NOW(6) - INTERVAL %(age_us)s MICROSECOND
LIMIT %(limit)s;

-- name: web_throughput
-- Jobs finished per minute and queue over the last `age_us`: a range of the primary key
-- (minute first), summed over hosts, already in (minute, queue) order.
SELECT UNIX_TIMESTAMP(minute) AS minute, queue, SUM(done) AS done, SUM(failed) AS failed
FROM forkq_throughput
WHERE minute >= NOW(6) - INTERVAL %(age_us)s MICROSECOND
GROUP BY minute, queue
ORDER BY minute, queue;

-- name: record_handler_stats
-- Each master adds its children's attempts to the current minute, per handler, every
-- heartbeat (supervisor/timing.py): one row per handler, minute and host, never contended.
INSERT INTO forkq_handler_stats (minute, handler, host, jobs, failed, seconds, fastest,
  slowest, b00, b01, b02, b03, b04, b05, b06, b07, b08, b09, b10, b11, b12, b13, b14, b15,
  b16, b17, b18, b19, b20, b21, b22, b23)
VALUES (FROM_UNIXTIME(%(minute)s), %(handler)s, %(host)s, %(jobs)s, %(failed)s,
  %(seconds)s, %(fastest)s, %(slowest)s, %(b00)s, %(b01)s, %(b02)s, %(b03)s, %(b04)s,
  %(b05)s, %(b06)s, %(b07)s, %(b08)s, %(b09)s, %(b10)s, %(b11)s, %(b12)s, %(b13)s, %(b14)s,
  %(b15)s, %(b16)s, %(b17)s, %(b18)s, %(b19)s, %(b20)s, %(b21)s, %(b22)s, %(b23)s)
ON DUPLICATE KEY UPDATE
  jobs = jobs + VALUES(jobs), failed = failed + VALUES(failed),
  seconds = seconds + VALUES(seconds),
  fastest = LEAST(COALESCE(fastest, VALUES(fastest)), COALESCE(VALUES(fastest), fastest)),
  slowest = GREATEST(COALESCE(slowest, VALUES(slowest)), COALESCE(VALUES(slowest), slowest)),
  b00 = b00 + VALUES(b00), b01 = b01 + VALUES(b01), b02 = b02 + VALUES(b02),
  b03 = b03 + VALUES(b03), b04 = b04 + VALUES(b04), b05 = b05 + VALUES(b05),
  b06 = b06 + VALUES(b06), b07 = b07 + VALUES(b07), b08 = b08 + VALUES(b08),
  b09 = b09 + VALUES(b09), b10 = b10 + VALUES(b10), b11 = b11 + VALUES(b11),
  b12 = b12 + VALUES(b12), b13 = b13 + VALUES(b13), b14 = b14 + VALUES(b14),
  b15 = b15 + VALUES(b15), b16 = b16 + VALUES(b16), b17 = b17 + VALUES(b17),
  b18 = b18 + VALUES(b18), b19 = b19 + VALUES(b19), b20 = b20 + VALUES(b20),
  b21 = b21 + VALUES(b21), b22 = b22 + VALUES(b22), b23 = b23 + VALUES(b23);

-- name: prune_handler_stats
DELETE FROM forkq_handler_stats WHERE minute < NOW(6) - INTERVAL %(age_us)s MICROSECOND
LIMIT %(limit)s;

-- name: web_handler_stats
-- Per handler over the last `age_us`: a range of the primary key (minute first), summed.
SELECT handler, SUM(jobs) AS jobs, SUM(failed) AS failed, SUM(seconds) AS seconds,
       MIN(fastest) AS fastest, MAX(slowest) AS slowest,
       SUM(b00) AS b00, SUM(b01) AS b01, SUM(b02) AS b02, SUM(b03) AS b03, SUM(b04) AS b04,
       SUM(b05) AS b05, SUM(b06) AS b06, SUM(b07) AS b07, SUM(b08) AS b08, SUM(b09) AS b09,
       SUM(b10) AS b10, SUM(b11) AS b11, SUM(b12) AS b12, SUM(b13) AS b13, SUM(b14) AS b14,
       SUM(b15) AS b15, SUM(b16) AS b16, SUM(b17) AS b17, SUM(b18) AS b18, SUM(b19) AS b19,
       SUM(b20) AS b20, SUM(b21) AS b21, SUM(b22) AS b22, SUM(b23) AS b23
FROM forkq_handler_stats
WHERE minute >= NOW(6) - INTERVAL %(age_us)s MICROSECOND
GROUP BY handler
ORDER BY handler;

-- name: web_handler_series
-- One handler per minute over the last `age_us`: a range of forkq_handler_stats_handler.
SELECT UNIX_TIMESTAMP(minute) AS minute, SUM(jobs) AS jobs, SUM(failed) AS failed,
       SUM(seconds) AS seconds, MIN(fastest) AS fastest, MAX(slowest) AS slowest,
       SUM(b00) AS b00, SUM(b01) AS b01, SUM(b02) AS b02, SUM(b03) AS b03, SUM(b04) AS b04,
       SUM(b05) AS b05, SUM(b06) AS b06, SUM(b07) AS b07, SUM(b08) AS b08, SUM(b09) AS b09,
       SUM(b10) AS b10, SUM(b11) AS b11, SUM(b12) AS b12, SUM(b13) AS b13, SUM(b14) AS b14,
       SUM(b15) AS b15, SUM(b16) AS b16, SUM(b17) AS b17, SUM(b18) AS b18, SUM(b19) AS b19,
       SUM(b20) AS b20, SUM(b21) AS b21, SUM(b22) AS b22, SUM(b23) AS b23
FROM forkq_handler_stats
WHERE handler = %(handler)s AND minute >= NOW(6) - INTERVAL %(age_us)s MICROSECOND
GROUP BY minute
ORDER BY minute;

-- name: web_id_range
-- The lowest and highest job ids: one dive to each end of the primary key.
SELECT (SELECT MIN(id) FROM forkq_jobs) AS first, (SELECT MAX(id) FROM forkq_jobs) AS last;

-- name: web_jobs_window
-- A page of jobs, newest first, from the primary key between two ids: whatever the filters
-- match, it reads at most before - floor rows (the page offers to look further down).
SELECT id, queue, handler, status, priority, attempts, max_attempts, unique_key, locked_by,
       locked_until, run_at, enqueued_at, started_at, finished_at,
       LEFT(last_error, 300) AS last_error, LEFT(payload, 120) AS payload
FROM forkq_jobs FORCE INDEX (PRIMARY)
WHERE id < %(before)s AND id >= %(floor)s
  AND (%(queue)s IS NULL OR queue = %(queue)s)
  AND (%(status)s IS NULL OR status = %(status)s)
  AND (%(status)s IS NULL OR %(status)s <> 'running' OR started_at IS NOT NULL)
  AND (%(handler)s IS NULL OR handler = %(handler)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: web_jobs_search
-- The dashboard's search: web_jobs_window's range of the primary key (the newest jobs,
-- bounded by the caller) with the search terms; JSON is read only from rows that hold it.
SELECT id, queue, handler, status, priority, attempts, max_attempts, unique_key, locked_by,
       locked_until, run_at, enqueued_at, started_at, finished_at,
       LEFT(last_error, 300) AS last_error, LEFT(payload, 120) AS payload
FROM forkq_jobs FORCE INDEX (PRIMARY)
WHERE id < %(before)s AND id >= %(floor)s
  AND (%(queue)s IS NULL OR queue = %(queue)s)
  AND (%(status)s IS NULL OR status = %(status)s)
  AND (%(handler)s IS NULL OR handler = %(handler)s)
  AND (%(error)s IS NULL OR LOWER(last_error) LIKE %(error)s ESCAPE '!')
  AND (%(tag)s IS NULL
       OR (CASE WHEN JSON_VALID(tags) THEN JSON_CONTAINS(tags, JSON_QUOTE(%(tag)s)) END) = 1)
  AND (%(path)s IS NULL
       OR (CASE WHEN JSON_VALID(payload) THEN JSON_UNQUOTE(JSON_EXTRACT(payload, %(path)s)) END)
          = %(value)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: web_count_status
-- Jobs of one status, counted up to %(limit)s: an index range (forkq_jobs_status).
SELECT COUNT(*) AS n FROM (SELECT 1 FROM forkq_jobs
  WHERE status = %(status)s
  AND (%(status)s <> 'running' OR started_at IS NOT NULL) LIMIT %(limit)s) AS c;

-- name: web_count_status_queue
SELECT COUNT(*) AS n FROM (SELECT 1 FROM forkq_jobs
  WHERE status = %(status)s AND queue = %(queue)s
  AND (%(status)s <> 'running' OR started_at IS NOT NULL) LIMIT %(limit)s) AS c;

-- name: web_jobs_status
-- A page of the jobs of one status, newest first, when they are few (web_count_status
-- said so): the index range, sorted.
SELECT id, queue, handler, status, priority, attempts, max_attempts, unique_key, locked_by,
       locked_until, run_at, enqueued_at, started_at, finished_at,
       LEFT(last_error, 300) AS last_error, LEFT(payload, 120) AS payload
FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE status = %(status)s AND id < %(before)s AND (%(handler)s IS NULL OR handler = %(handler)s)
  AND (%(status)s <> 'running' OR started_at IS NOT NULL)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: web_jobs_status_queue
SELECT id, queue, handler, status, priority, attempts, max_attempts, unique_key, locked_by,
       locked_until, run_at, enqueued_at, started_at, finished_at,
       LEFT(last_error, 300) AS last_error, LEFT(payload, 120) AS payload
FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE status = %(status)s AND queue = %(queue)s AND id < %(before)s
  AND (%(handler)s IS NULL OR handler = %(handler)s)
  AND (%(status)s <> 'running' OR started_at IS NOT NULL)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: ready_among
-- How many of these jobs are ready: what a retry really changed (MySQL's found-rows count
-- includes the rows UPDATE IGNORE left alone).
SELECT COUNT(*) AS n FROM forkq_jobs FORCE INDEX (PRIMARY) WHERE id IN %(ids)s AND status = 'ready';

-- name: key_holder
-- Another job holding this unique key in its scope (schema 10): why a retry was ignored.
SELECT id FROM forkq_jobs
WHERE unique_key = %(key)s AND id <> %(id)s AND unique_live IS NOT NULL
ORDER BY id LIMIT 1;

-- name: web_job_by_key
SELECT id FROM forkq_jobs WHERE unique_key = %(key)s;

-- name: web_process
SELECT * FROM forkq_processes WHERE name = %(name)s;

-- name: web_running
-- Running and cancelling jobs (few: workers x claim batch per host), each with the process
-- holding it (a primary-key dive).
SELECT j.id, j.queue, j.handler, j.status, j.priority, j.attempts, j.max_attempts,
       j.unique_key, j.locked_by, j.locked_until, j.run_at, j.enqueued_at, j.started_at,
       j.finished_at, LEFT(j.last_error, 300) AS last_error, LEFT(j.payload, 120) AS payload,
       j.progress, p.host AS host, p.pid AS pid
FROM forkq_jobs j FORCE INDEX (forkq_jobs_status)
LEFT JOIN forkq_processes p ON p.name = j.locked_by
WHERE j.status IN ('running', 'cancelling') AND (%(queue)s IS NULL OR j.queue = %(queue)s)
  AND (j.status = 'cancelling' OR j.started_at IS NOT NULL)
ORDER BY j.started_at, j.id
LIMIT %(limit)s;

-- name: web_discard
-- Discarding dead jobs deletes them (only dead ones: a stale page cannot delete others).
DELETE j FROM forkq_jobs AS j FORCE INDEX (PRIMARY) WHERE id IN %(ids)s AND status = 'dead';

-- name: web_discard_dead
-- Every dead job of a queue, %(limit)s at a time (the store loops): short transactions.
DELETE FROM forkq_jobs WHERE status = 'dead' AND queue = %(queue)s LIMIT %(limit)s;

-- name: web_slots
-- A schedule's latest slots: a range of the primary key (schedule, slot), newest first.
SELECT UNIX_TIMESTAMP(slot) AS slot, job_id, UNIX_TIMESTAMP(enqueued_at) AS enqueued_at
FROM forkq_schedule_slots
WHERE schedule = %(schedule)s
ORDER BY slot DESC
LIMIT %(limit)s;

-- limits and snooze -----------------------------------------------------------------------
-- Flow control (SPEC "Flow control (cluster-wide)", supervisor/store/limits.py). A job a
-- limit covers is claimed only under the lock of its bucket's forkq_limits row, where the
-- claim counts the bucket's running jobs (from forkq_jobs itself, so a crashed worker
-- never keeps a slot) and its recent starts. A job over a limit is parked: it stays
-- `ready`, and limit_wait names its bucket, which takes it out of the range claims read
-- (forkq_jobs_limit), so thousands waiting on a full bucket cost a claim nothing.

-- name: insert_job_keyed
-- A job with a limit_key (any run_at, unique key or not): insert_job_unique's columns and
-- limit_key. Only keyed jobs name the column, so an older schema still takes the others.
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts,
                        limit_key)
VALUES (%(queue)s, %(handler)s, %(payload)s, %(priority)s,
        COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
        IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
        %(unique_key)s, %(max_attempts)s, %(limit_key)s)
ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id);

-- name: insert_jobs_head_keyed
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts, limit_key) VALUES;

-- name: insert_jobs_row_keyed
(%(queue)s, %(handler)s, %(payload)s, %(priority)s,
 COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
 IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
 %(unique_key)s, %(max_attempts)s, %(limit_key)s);

-- name: insert_job_grouped
-- A job with a group_key (its tenant in a fair pool; any run_at, keys or not): both keys
-- named. Only such jobs name group_key, so an older schema still takes the others.
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts,
                        limit_key, group_key)
VALUES (%(queue)s, %(handler)s, %(payload)s, %(priority)s,
        COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
        IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
        %(unique_key)s, %(max_attempts)s, %(limit_key)s, %(group_key)s)
ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id);

-- name: insert_jobs_head_grouped
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts, limit_key, group_key) VALUES;

-- name: insert_jobs_row_grouped
(%(queue)s, %(handler)s, %(payload)s, %(priority)s,
 COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
 IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
 %(unique_key)s, %(max_attempts)s, %(limit_key)s, %(group_key)s);

-- name: insert_job_tagged
-- A job with tags (any run_at, unique key or limit_key): insert_job_grouped's columns and
-- tags. Only tagged jobs name the column, so an older schema still takes the others.
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts,
                        limit_key, group_key, tags)
VALUES (%(queue)s, %(handler)s, %(payload)s, %(priority)s,
        COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
        IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
        %(unique_key)s, %(max_attempts)s, %(limit_key)s, %(group_key)s, %(tags)s)
ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id);

-- name: insert_jobs_head_tagged
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts, limit_key, group_key, tags) VALUES;

-- name: insert_jobs_row_tagged
(%(queue)s, %(handler)s, %(payload)s, %(priority)s,
 COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
 IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
 %(unique_key)s, %(max_attempts)s, %(limit_key)s, %(group_key)s, %(tags)s);

-- name: insert_job_batched
-- A job of a batch (q.batch()): insert_job_tagged's columns and batch_id (schema 13).
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts,
                        limit_key, group_key, tags, batch_id)
VALUES (%(queue)s, %(handler)s, %(payload)s, %(priority)s,
        COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
        IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
        %(unique_key)s, %(max_attempts)s, %(limit_key)s, %(group_key)s, %(tags)s, %(batch_id)s)
ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id);

-- name: insert_jobs_head_batched
INSERT INTO forkq_jobs (queue, handler, payload, priority, run_at, status, unique_key, max_attempts, limit_key, group_key, tags, batch_id) VALUES;

-- name: insert_jobs_row_batched
(%(queue)s, %(handler)s, %(payload)s, %(priority)s,
 COALESCE(FROM_UNIXTIME(%(run_at)s), NOW(6) + INTERVAL %(delay_us)s MICROSECOND),
 IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready'),
 %(unique_key)s, %(max_attempts)s, %(limit_key)s, %(group_key)s, %(tags)s, %(batch_id)s);

-- name: claim_select_limited
-- claim_select for a queue some limit covers: the same order, from forkq_jobs_limit, whose
-- range leaves out the parked jobs (limit_wait <> ''); with handler and limit_key, which
-- name a job's buckets.
-- (Its numbers in one column as claim_select's, then limit_key.)
SELECT CONCAT_WS(' ', id, priority, attempts, IFNULL(max_attempts, '-'), IFNULL(batch_id, '-'),
                 IFNULL(UNIX_TIMESTAMP(run_at), '-'), IFNULL(UNIX_TIMESTAMP(enqueued_at), '-'))
         AS numbers, handler, payload, unique_key, limit_key
FROM forkq_jobs FORCE INDEX (forkq_jobs_limit)
WHERE ready_wait = '' AND queue = %(queue)s AND run_at <= NOW(6) AND status = 'ready'
ORDER BY priority DESC, run_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: claim_update_at
-- claim_update under limits: the first job's started_at is the instant the claim counted
-- the starts at (the buckets' clock); jobs behind it start later, never earlier, so no
-- rate started_at shows is above the one a bucket kept.
UPDATE forkq_jobs
SET status = 'running', locked_by = %(owner)s, attempts = LEAST(attempts, 2147483646) + 1,
    started_at = IF(id = %(first)s, FROM_UNIXTIME(%(started)s), NULL), limit_wait = '',
    locked_until = NOW(6) + INTERVAL %(lease_us)s MICROSECOND
WHERE id IN %(ids)s;

-- name: limit_heads
-- The first job parked on each bucket in this queue, as [-priority, run_at, id] (run_at in
-- microseconds: every digit): a claimed job behind it waits too, so a bucket keeps order.
SELECT b.bucket,
       (SELECT JSON_ARRAY(-j.priority, CAST(UNIX_TIMESTAMP(j.run_at) * 1000000 AS SIGNED), j.id)
        FROM forkq_jobs j FORCE INDEX (forkq_jobs_limit)
        WHERE j.ready_wait = b.bucket AND j.queue = %(queue)s AND j.status = 'ready'
        ORDER BY j.priority DESC, j.run_at, j.id
        LIMIT 1) AS head
FROM JSON_TABLE(%(buckets)s, '$[*]' COLUMNS (
       bucket VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$')) AS b;

-- name: unpark_select_queue
-- unpark_select within one queue: a claim hands a freed slot to its own queue first.
SELECT id FROM forkq_jobs FORCE INDEX (forkq_jobs_limit)
WHERE ready_wait = %(bucket)s AND queue = %(queue)s AND status = 'ready'
ORDER BY priority DESC, run_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: claim_update_reserve
-- The claim of a batch in one bucket of a limit with a concurrency and no rate, far from
-- full, with nothing parked: the jobs claimed and the bucket's bound raised in one
-- statement, the bucket's row locked by it and its guard read under that lock. No row
-- changes when the guard fails (0 rows): the claim then takes the long way (limit_lock).
UPDATE forkq_jobs j
JOIN forkq_limits b ON b.name = %(name)s AND b.limit_key = %(key)s
SET j.status = 'running', j.locked_by = %(owner)s, j.attempts = LEAST(j.attempts, 2147483646) + 1,
    j.started_at = IF(j.id = %(first)s, NOW(6), NULL), j.limit_wait = '',
    j.locked_until = NOW(6) + INTERVAL %(lease_us)s MICROSECOND,
    b.running_added = b.running_added + %(count)s, b.updated_at = NOW(6)
WHERE j.id IN %(ids)s AND b.wake_at IS NULL AND b.running_counted IS NOT NULL
  AND b.running_counted + b.running_added + %(needed)s <= %(concurrency)s;

-- name: limit_lock
-- The buckets a claim needs, locked in one global order (the primary key's), so two
-- claims never wait on each other in a cycle; their state, and the database clock once
-- each row is locked (SYSDATE: NOW is the statement's start, before a wait for the lock;
-- a rate counts the claim's starts at this instant, rates.py).
-- (running_all is SQLite's: here a count read with the lock could predate its wait.)
SELECT name, limit_key, rate_slice_us, rate_base, rate_counts, running_counted, running_added,
       UNIX_TIMESTAMP(wake_at) + 0e0 AS wake_at, UNIX_TIMESTAMP(SYSDATE(6)) + 0e0 AS now,
       NULL AS running_all
FROM forkq_limits
WHERE (name, limit_key) IN %(buckets)s
ORDER BY name, limit_key
FOR UPDATE;

-- name: limit_lock_one
-- limit_lock for the one bucket most claims need: a primary-key equality.
SELECT name, limit_key, rate_slice_us, rate_base, rate_counts, running_counted, running_added,
       UNIX_TIMESTAMP(wake_at) + 0e0 AS wake_at, UNIX_TIMESTAMP(SYSDATE(6)) + 0e0 AS now,
       NULL AS running_all
FROM forkq_limits
WHERE name = %(name)s AND limit_key = %(key)s
FOR UPDATE;

-- name: limit_lock_skip
-- The same for the unpark pass, which never waits: a bucket another claim holds is looked
-- at next time.
SELECT name, limit_key, rate_slice_us, rate_base, rate_counts, running_counted, running_added,
       UNIX_TIMESTAMP(wake_at) + 0e0 AS wake_at, UNIX_TIMESTAMP(NOW(6)) + 0e0 AS now
FROM forkq_limits
WHERE (name, limit_key) IN %(buckets)s
ORDER BY name, limit_key
FOR UPDATE SKIP LOCKED;

-- name: limit_insert
-- Buckets seen for the first time (bound as a JSON array of [name, key] pairs).
INSERT IGNORE INTO forkq_limits (name, limit_key)
SELECT b.name, b.limit_key
FROM JSON_TABLE(%(buckets)s, '$[*]' COLUMNS (
       name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
       limit_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS b
ORDER BY b.name, b.limit_key;

-- name: limit_usage
-- Running jobs by what decides their buckets, read after the buckets are locked. Running
-- and cancelling rows are few (workers x claim batch per host): the status index finds
-- them all; a job that left `running` (done, failed, killed, settled, reaped) no longer
-- counts, so a slot can never leak.
SELECT handler, queue, limit_key, COUNT(*) AS n
FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE status IN ('running', 'cancelling')
GROUP BY handler, queue, limit_key;

-- name: limit_save
-- Each bucket's new state, one statement for all (a JSON array of
-- [name, key, slice_us, base, counts, wake_at, counted, added]); the rows are locked by
-- this transaction.
INSERT INTO forkq_limits (name, limit_key, rate_slice_us, rate_base, rate_counts, wake_at,
                          running_counted, running_added)
SELECT s.name, s.limit_key, s.slice_us, s.base, s.counts, FROM_UNIXTIME(s.wake_at), s.counted,
       s.added
FROM JSON_TABLE(%(states)s, '$[*]' COLUMNS (
       name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
       limit_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
       slice_us BIGINT PATH '$[2]',
       base BIGINT PATH '$[3]',
       counts VARCHAR(255) PATH '$[4]',
       wake_at DOUBLE PATH '$[5]',
       counted INT PATH '$[6]',
       added INT PATH '$[7]')) AS s
ON DUPLICATE KEY UPDATE rate_slice_us = VALUES(rate_slice_us), rate_base = VALUES(rate_base),
                        rate_counts = VALUES(rate_counts), wake_at = VALUES(wake_at),
                        running_counted = VALUES(running_counted),
                        running_added = VALUES(running_added), updated_at = NOW(6);

-- name: claim_update_limited
-- claim_update_at and limit_save in one statement (a multi-table UPDATE): the claimed jobs
-- and their buckets' new state (the rows are locked by this transaction).
UPDATE forkq_jobs j
JOIN JSON_TABLE(%(states)s, '$[*]' COLUMNS (
       name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
       limit_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]',
       slice_us BIGINT PATH '$[2]',
       base BIGINT PATH '$[3]',
       counts VARCHAR(255) PATH '$[4]',
       wake_at DOUBLE PATH '$[5]',
       counted INT PATH '$[6]',
       added INT PATH '$[7]')) AS s
JOIN forkq_limits b ON b.name = s.name AND b.limit_key = s.limit_key
SET j.status = 'running', j.locked_by = %(owner)s, j.attempts = LEAST(j.attempts, 2147483646) + 1,
    j.started_at = IF(j.id = %(first)s, FROM_UNIXTIME(%(started)s), NULL), j.limit_wait = '',
    j.locked_until = NOW(6) + INTERVAL %(lease_us)s MICROSECOND,
    b.rate_slice_us = s.slice_us, b.rate_base = s.base, b.rate_counts = s.counts,
    b.wake_at = FROM_UNIXTIME(s.wake_at), b.running_counted = s.counted,
    b.running_added = s.added, b.updated_at = NOW(6)
WHERE j.id IN %(ids)s;

-- name: limit_park
-- Jobs over a limit stay ready and wait on their bucket, out of the claims' range.
UPDATE forkq_jobs FORCE INDEX (PRIMARY) SET limit_wait = %(bucket)s WHERE id IN %(ids)s AND status = 'ready';

-- name: limit_refuse
-- Ready jobs a claim under limits cannot put in a bucket (a limit_key holding a NUL, which
-- enqueue refuses and another program's INSERT may not): dead at once, with the reason.
UPDATE forkq_jobs FORCE INDEX (PRIMARY) SET status = 'dead', finished_at = NOW(6), last_error = %(error)s
WHERE id IN %(ids)s AND status = 'ready';

-- name: limit_due
-- Buckets with parked jobs to look at again (their wake_at has come): an index range.
SELECT name, limit_key FROM forkq_limits FORCE INDEX (forkq_limits_wake)
WHERE wake_at <= NOW(6)
ORDER BY wake_at
LIMIT %(limit)s;

-- name: unpark_select
-- The first jobs parked on a bucket, in claim order within each queue.
SELECT id FROM forkq_jobs FORCE INDEX (forkq_jobs_limit)
WHERE ready_wait = %(bucket)s AND status = 'ready'
ORDER BY queue, priority DESC, run_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: unpark_update
UPDATE forkq_jobs FORCE INDEX (PRIMARY) SET limit_wait = '' WHERE id IN %(ids)s AND status = 'ready';

-- name: parked_bucket_after
-- The next bucket ready jobs are parked on, after %(after)s: one dive in forkq_jobs_limit
-- each (MIN on its first column), so the chores walk the buckets, never the parked jobs.
-- On ready_wait, the index's column: with `status` and `limit_wait` the server would not
-- use it and read the whole table, once a bucket.
SELECT MIN(ready_wait) AS limit_wait FROM forkq_jobs
WHERE ready_wait > %(after)s;

-- name: limit_wake
-- Buckets with parked jobs and no wake_at (a parked job retried by an operator, a row
-- pruned): looked at by the next claim.
INSERT INTO forkq_limits (name, limit_key, wake_at)
SELECT b.name, b.limit_key, NOW(6)
FROM JSON_TABLE(%(buckets)s, '$[*]' COLUMNS (
       name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
       limit_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS b
ORDER BY b.name, b.limit_key
ON DUPLICATE KEY UPDATE wake_at = COALESCE(forkq_limits.wake_at, NOW(6));

-- name: limit_idle
-- Bucket rows nobody wrote for `age_us` and with nothing parked: their rate slices are
-- all past, so deleting them forgets nothing (the next claim makes the row again).
SELECT name, limit_key FROM forkq_limits
WHERE wake_at IS NULL AND updated_at < NOW(6) - INTERVAL %(age_us)s MICROSECOND
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: limit_delete
DELETE FROM forkq_limits WHERE (name, limit_key) IN %(buckets)s AND wake_at IS NULL;

-- name: limit_rows
-- forkq status: the buckets, first ones by name and key.
SELECT name, limit_key, rate_slice_us, rate_base, rate_counts, running_counted, running_added,
       UNIX_TIMESTAMP(wake_at) + 0e0 AS wake_at, UNIX_TIMESTAMP(NOW(6)) + 0e0 AS now
FROM forkq_limits
ORDER BY name, limit_key
LIMIT %(limit)s;

-- name: limit_waiting
-- forkq status: parked jobs per bucket, counted up to %(limit)s index entries in all.
SELECT w.limit_wait, COUNT(*) AS n
FROM (SELECT ready_wait AS limit_wait FROM forkq_jobs FORCE INDEX (forkq_jobs_limit)
      WHERE ready_wait > '' LIMIT %(limit)s) AS w
GROUP BY w.limit_wait;

-- name: snooze
-- Snooze(delay): back to ready (or scheduled) after the delay, the claim's attempt given
-- back, the snooze counted, while the handler's max_snoozes is not reached. IGNORE: as
-- fail_retry's (a job whose unique key was taken meanwhile ends superseded).
UPDATE IGNORE forkq_jobs
SET status = %(status)s, run_at = NOW(6) + INTERVAL %(delay_us)s MICROSECOND,
    attempts = GREATEST(attempts - 1, 0), snoozes = snoozes + 1,
    locked_by = NULL, locked_until = NULL
WHERE id = %(id)s AND status = 'running' AND locked_by = %(owner)s
  AND snoozes < %(max_snoozes)s;

-- Fair share within a queue (SPEC "Fair share within a queue", supervisor/store/fair.py).
-- A job's tenant is the generated column forkq_jobs.tenant (group_key, else limit_key, else
-- ''); forkq_tenants is the round-robin cursor of a fair queue. Every statement reads a
-- bounded number of rows, whatever the number of tenants and jobs.

-- name: join_round
-- A producer's job with a group_key: its tenant joins its queue's round now (a tenant new
-- to the round is served first), whether the queue's pool is fair or not: a row costs a
-- claim nothing until a fair claim reaches it, and a fair claim deletes it once empty.
INSERT IGNORE INTO forkq_tenants (queue, tenant) VALUES (%(queue)s, %(group_key)s);

-- name: join_rounds
-- The same for a batch (MariaDB's multi-row insert): a JSON array of [queue, tenant] pairs.
INSERT IGNORE INTO forkq_tenants (queue, tenant)
SELECT b.queue, b.tenant
FROM JSON_TABLE(%(pairs)s, '$[*]' COLUMNS (
       queue VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[0]',
       tenant VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PATH '$[1]')) AS b
ORDER BY b.queue, b.tenant;

-- name: fair_prune
-- The chores: rows of queues no pool makes fair (a producer's group_key in a plain queue),
-- a chunk at a time. A fair queue's rows go as its claims find them empty.
DELETE FROM forkq_tenants WHERE queue NOT IN %(queues)s LIMIT %(limit)s;

-- name: fair_first_tenant
-- The first tenant with ready jobs in the queue (one dive in forkq_jobs_tenant) and the
-- tenant of the latest due ready job (one dive in forkq_jobs_status: a newcomer), each with
-- last_served from forkq_tenants (NULL: no row yet).
SELECT d.tenant, d.walk, t.last_served
FROM ((SELECT ready_tenant AS tenant, 1 AS walk FROM forkq_jobs FORCE INDEX (forkq_jobs_tenant)
       WHERE queue = %(queue)s AND ready_tenant IS NOT NULL
       ORDER BY ready_tenant LIMIT 1)
      UNION ALL
      (SELECT tenant, 0 AS walk FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
       WHERE status = 'ready' AND queue = %(queue)s
       ORDER BY run_at DESC LIMIT 1)) AS d
LEFT JOIN forkq_tenants t ON t.queue = %(queue)s AND t.tenant = d.tenant;

-- name: fair_next_tenant
-- The same with the next tenant after %(after)s: a process walks the tenants a step a
-- claim, so a tenant of a raw INSERT (or one whose row a claim deleted) joins the round.
SELECT d.tenant, d.walk, t.last_served
FROM ((SELECT ready_tenant AS tenant, 1 AS walk FROM forkq_jobs FORCE INDEX (forkq_jobs_tenant)
       WHERE queue = %(queue)s AND ready_tenant > %(after)s
       ORDER BY ready_tenant LIMIT 1)
      UNION ALL
      (SELECT tenant, 0 AS walk FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
       WHERE status = 'ready' AND queue = %(queue)s
       ORDER BY run_at DESC LIMIT 1)) AS d
LEFT JOIN forkq_tenants t ON t.queue = %(queue)s AND t.tenant = d.tenant;

-- name: fair_add_tenant
-- A tenant never served (last_served 0): first in the round.
INSERT IGNORE INTO forkq_tenants (queue, tenant) VALUES (%(queue)s, %(tenant)s);

-- name: fair_turn
-- The tenants served least recently, locked (SKIP LOCKED: a concurrent claim serves the
-- next ones, so one tenant's jobs are claimed by one claim at a time, in order), each with
-- its head job (priority, run_at, id: one dive in forkq_jobs_tenant), locked too and with
-- claim_select's columns. No head (id NULL): none ready (any_ready NULL), or another's.
-- The head's numbers in one column as claim_select's (NULL without a head).
SELECT t.tenant,
       IF(j.id IS NULL, (SELECT 1 FROM forkq_jobs e FORCE INDEX (forkq_jobs_tenant)
                         WHERE e.queue = t.queue AND e.ready_tenant = t.tenant
                         LIMIT 1), 1) AS any_ready,
       IF(j.id IS NULL, NULL,
          CONCAT_WS(' ', j.id, j.priority, j.attempts, IFNULL(j.max_attempts, '-'),
                    IFNULL(j.batch_id, '-'), IFNULL(UNIX_TIMESTAMP(j.run_at), '-'),
                    IFNULL(UNIX_TIMESTAMP(j.enqueued_at), '-'))) AS numbers,
       j.handler, j.payload, j.unique_key, j.limit_key
FROM forkq_tenants t FORCE INDEX (forkq_tenants_turn)
LEFT JOIN forkq_jobs j FORCE INDEX (PRIMARY)
  ON j.id = (SELECT h.id FROM forkq_jobs h FORCE INDEX (forkq_jobs_tenant)
             WHERE h.queue = t.queue AND h.ready_tenant = t.tenant
               AND h.run_at <= NOW(6)
             ORDER BY h.priority DESC, h.run_at, h.id
             LIMIT 1)
 AND j.status = 'ready'
WHERE t.queue = %(queue)s
ORDER BY t.last_served, t.tenant
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: fair_served
-- The tenants of a fair claim's jobs to the back of the round (the database clock in us),
-- after claim_update, in the claim's transaction (fair_turn locked their rows). Two
-- statements cost less than one multi-table UPDATE of jobs and tenants (one process
-- draining 20,000 jobs of 1,000 tenants: 1.3 against 2.4 ms a claim, and a quicker commit).
UPDATE forkq_tenants SET last_served = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
WHERE queue = %(queue)s AND tenant IN %(names)s;

-- name: fair_weigh
-- A pool's weights (schema 15): the served tenants of one weight keep their turn until
-- they have had `weight` claims in it, then go to the back of the round (served back to
-- 0). MariaDB assigns left to right: last_served is decided on served's old value.
UPDATE forkq_tenants
SET last_served = IF(served + 1 >= %(weight)s, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED),
                     last_served),
    served = IF(served + 1 >= %(weight)s, 0, served + 1)
WHERE queue = %(queue)s AND tenant IN %(names)s;

-- name: fair_busy
-- Tenants found without a ready job: those of them with a job running (or cancelling),
-- whose rows stay (fair_skip), so a job of theirs handed back finds its tenant in the round.
-- Two ranges of forkq_jobs_status (status, queue): the queue's running and cancelling jobs,
-- a few per worker. A plain read, which locks nothing (READ COMMITTED): as the subquery of
-- fair_forget's DELETE it share-locked every one of them, so a claim that found a tenant
-- empty waited for every end in flight in the queue, and two claims that had just written
-- their successes deadlocked. (With forkq_jobs_tenant's old (queue, status, tenant) and
-- `status IN`, it read and locked every job of the queue: 34,271 row locks behind a flood.)
SELECT DISTINCT tenant FROM forkq_jobs FORCE INDEX (forkq_jobs_status)
WHERE status IN ('running', 'cancelling') AND queue = %(queue)s AND tenant IN %(names)s;

-- name: fair_forget
-- ...the rows (locked by this claim) of the others go (a producer's next job, or the walk,
-- brings a tenant back)...
DELETE FROM forkq_tenants WHERE queue = %(queue)s AND tenant IN %(names)s;

-- name: fair_skip
-- ...and the busy ones go to the back of the round: a job of theirs handed back, released or
-- reaped is ready again with its tenant still in the round.
UPDATE forkq_tenants SET last_served = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)
WHERE queue = %(queue)s AND tenant IN %(names)s;

-- dependencies ----------------------------------------------------------------------------
-- depends_on (SPEC "Composing jobs", supervisor/store/dependencies.py). A child waits
-- (status `waiting`, never claimed) while a parent is unfinished; forkq_dependencies holds
-- one row per (parent, child) until the child ends. forkq_jobs.deps flags the rows
-- involved: bit 1 on a parent some child waits on, bit 2 on a child. The end of a job with
-- neither is the statements below with `(deps & 3) = 0` (skip = 3): no other statement,
-- no other table. A flagged job is left for the second pass (skip = 0), which ends it,
-- settles its children and forgets its parents in the same transaction. Needs schema 14
-- (the plain names above serve older ones).

-- name: deps_complete_delete
DELETE j FROM forkq_jobs AS j FORCE INDEX (PRIMARY) WHERE id IN %(ids)s AND status IN ('running', 'cancelling') AND locked_by = %(owner)s
  AND (deps & %(skip)s) = 0;

-- name: deps_complete_keep
UPDATE forkq_jobs FORCE INDEX (PRIMARY)
SET last_error = CASE WHEN status = 'cancelling' THEN NULL ELSE last_error END,
    status = 'done', finished_at = NOW(6), started_at = COALESCE(started_at, NOW(6)),
    locked_by = NULL, locked_until = NULL
WHERE id IN %(ids)s AND status IN ('running', 'cancelling') AND locked_by = %(owner)s
  AND (deps & %(skip)s) = 0;

-- name: deps_complete_archive_copy
INSERT INTO forkq_jobs_archive
  (id, queue, handler, payload, status, priority, run_at, attempts, max_attempts, unique_key,
   locked_by, locked_until, last_error, enqueued_at, started_at, finished_at)
SELECT id, queue, handler, payload, 'done', priority, run_at, attempts, max_attempts, unique_key,
       locked_by, NULL, CASE WHEN status = 'cancelling' THEN NULL ELSE last_error END, enqueued_at, COALESCE(started_at, NOW(6)), NOW(6)
FROM forkq_jobs FORCE INDEX (PRIMARY) WHERE id IN %(ids)s AND status IN ('running', 'cancelling') AND locked_by = %(owner)s
  AND (deps & %(skip)s) = 0;

-- name: deps_fail_dead
UPDATE forkq_jobs
SET status = 'dead', finished_at = NOW(6), started_at = COALESCE(started_at, NOW(6)),
    last_error = %(error)s,
    locked_by = NULL, locked_until = NULL, max_attempts = COALESCE(%(max_attempts)s, max_attempts)
WHERE id = %(id)s AND status = 'running' AND locked_by = %(owner)s
  AND (%(only_expired)s = 0 OR locked_until < NOW(6)) AND (deps & %(skip)s) = 0;

-- name: deps_held
-- The second pass of a completion: the jobs of the batch this owner still holds after the
-- first pass are the flagged parents (and none when a lease was lost), locked.
SELECT id FROM forkq_jobs FORCE INDEX (PRIMARY) WHERE id IN %(ids)s AND status IN ('running', 'cancelling') AND locked_by = %(owner)s
ORDER BY id FOR UPDATE;

-- name: deps_lock_parents
-- A child's enqueue locks its parents first (id order), so a parent's end and the child's
-- enqueue are serialised on the parent's row: either the end comes first and the enqueue
-- reads it ended, or the enqueue flags the parent and the end sees the flag.
SELECT id, status FROM forkq_jobs WHERE id IN %(ids)s ORDER BY id FOR UPDATE;

-- name: deps_flag_parents
UPDATE forkq_jobs SET deps = deps | 1 WHERE id IN %(ids)s;

-- name: deps_mark_child
-- The child just inserted (in this transaction): waiting, or cancelled when a parent had
-- already failed; its parents recorded (deps bit 2).
UPDATE forkq_jobs
SET status = COALESCE(%(status)s, status), deps = deps | 2, last_error = %(error)s,
    finished_at = IF(%(status)s = 'cancelled', NOW(6), finished_at)
WHERE id = %(id)s;

-- name: deps_add_edges
-- A JSON array of [parent, child, on_parent_failure].
INSERT INTO forkq_dependencies (parent_id, child_id, on_parent_failure)
SELECT e.parent_id, e.child_id, e.on_parent_failure
FROM JSON_TABLE(%(edges)s, '$[*]' COLUMNS (
  parent_id BIGINT UNSIGNED PATH '$[0]', child_id BIGINT UNSIGNED PATH '$[1]',
  on_parent_failure VARCHAR(8) PATH '$[2]')) AS e;

-- name: deps_children
-- The children of parents that just ended (the parents' rows are locked by this
-- transaction, so no child can be added meanwhile).
SELECT parent_id, child_id, on_parent_failure FROM forkq_dependencies
WHERE parent_id IN %(ids)s ORDER BY child_id;

-- name: deps_lock_waiting
-- Those children still waiting, locked in id order (two parents' ends lock them in one
-- order, so they queue rather than deadlock).
SELECT id FROM forkq_jobs FORCE INDEX (PRIMARY) WHERE id IN %(ids)s AND status = 'waiting' ORDER BY id FOR UPDATE;

-- name: deps_unfinished
-- Of those children, the ones with a parent not ended yet (a parent row gone has ended: it
-- was deleted on success, or purged). Read after the children's locks: READ COMMITTED
-- gives this statement a fresh view, holding every parent end committed before the lock
-- was granted (see dependencies.py for why a release is exact).
SELECT d.child_id, COUNT(*) AS n
FROM forkq_dependencies d JOIN forkq_jobs p ON p.id = d.parent_id
WHERE d.child_id IN %(ids)s AND p.status IN ('waiting', 'ready', 'scheduled', 'running', 'cancelling')
GROUP BY d.child_id;

-- name: deps_release
-- No UPDATE here reads forkq_jobs in a subquery (MySQL 8 refuses it: 1093): the ids come
-- from the statements above.
UPDATE forkq_jobs FORCE INDEX (PRIMARY)
SET status = IF(run_at > NOW(6) + INTERVAL %(ahead_us)s MICROSECOND, 'scheduled', 'ready')
WHERE id IN %(ids)s AND status = 'waiting';

-- name: deps_cancel
UPDATE forkq_jobs FORCE INDEX (PRIMARY)
SET status = 'cancelled', finished_at = NOW(6), last_error = %(error)s
WHERE id IN %(ids)s AND status = 'waiting';

-- name: deps_forget
-- A child's rows go when it ends (done, dead, cancelled): the table holds only what waits
-- or runs.
DELETE FROM forkq_dependencies WHERE child_id IN %(ids)s;

-- name: deps_sweep_top
-- The chores' sweep (DependencyOps.sweep_waiting) starts somewhere up to here.
SELECT COALESCE(MAX(child_id), 0) AS top FROM forkq_dependencies;

-- name: deps_sweep_window
-- At most :limit rows of the sweep, a range of forkq_dependencies_child: bounded
-- whatever the table holds.
SELECT child_id FROM forkq_dependencies
WHERE child_id >= %(start)s AND child_id < %(stop)s ORDER BY child_id LIMIT %(limit)s;

-- name: deps_sweep_edges
-- Every parent of those children that still wait, with how it stands (NULL: gone).
SELECT d.parent_id, d.child_id, d.on_parent_failure, p.status AS parent_status
FROM forkq_dependencies d
JOIN forkq_jobs c ON c.id = d.child_id AND c.status = 'waiting'
LEFT JOIN forkq_jobs p ON p.id = d.parent_id
WHERE d.child_id IN %(ids)s ORDER BY d.child_id, d.parent_id;

-- name: deps_parents
SELECT parent_id AS id FROM forkq_dependencies WHERE child_id = %(id)s ORDER BY parent_id;

-- name: deps_dependents
SELECT child_id AS id FROM forkq_dependencies WHERE parent_id = %(id)s ORDER BY child_id;

-- Batches (store/batches.py). A batch settles when no job of it is left unfinished: the
-- transaction that ends one of its jobs counts the others on forkq_jobs_batch (at most
-- `limit`, so the count costs the same early in a batch of 100,000), and only when few are
-- left locks the batch row and counts again (see store/batches.py for why that is exact).

-- name: batch_create
INSERT INTO forkq_batches (callbacks, payload) VALUES (%(callbacks)s, %(payload)s);

-- name: batch_last_id
SELECT LAST_INSERT_ID() AS id;

-- name: batch_seal
UPDATE forkq_batches SET sealed = 1, total = %(total)s WHERE id = %(id)s AND sealed = 0;

-- name: batch_open_count
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM forkq_jobs FORCE INDEX (forkq_jobs_batch)
  WHERE batch_id = %(id)s AND batch_status NOT IN ('done', 'dead', 'cancelled')
  LIMIT %(limit)s
) AS open_jobs;

-- name: batch_members_of
-- The master, before it writes a busy child's successes (a hand-back): which of them are
-- in a batch, so the batch hook runs there too (the child knew; its ledger lists ids only).
SELECT id, batch_id FROM forkq_jobs FORCE INDEX (PRIMARY)
WHERE id IN %(ids)s AND batch_id IS NOT NULL;

-- name: batch_ready_count
-- The first look, from the newest ready job down: while the batch has many ready jobs
-- these are live index entries, found at once. (From the low end, a count would first
-- step over the entries of every job claimed since, delete-marked until InnoDB purges.)
SELECT COUNT(*) AS n FROM (
  SELECT 1 FROM forkq_jobs FORCE INDEX (forkq_jobs_batch)
  WHERE batch_id = %(id)s AND batch_status = 'ready'
  ORDER BY id DESC
  LIMIT %(limit)s
) AS ready_jobs;

-- name: batch_lock
SELECT id, callbacks, payload, total, sealed, settled_at IS NOT NULL AS settled
FROM forkq_batches WHERE id = %(id)s FOR UPDATE;

-- name: batch_ended
SELECT batch_status AS status, COUNT(*) AS n FROM forkq_jobs FORCE INDEX (forkq_jobs_batch)
WHERE batch_id = %(id)s GROUP BY batch_status;

-- name: batch_settle
UPDATE forkq_batches
SET settled_at = NOW(6), done = %(done)s, dead = %(dead)s, cancelled = %(cancelled)s, fired = %(fired)s
WHERE id = %(id)s AND settled_at IS NULL;

-- name: batch_get
SELECT id, callbacks, payload, total, sealed, done, dead, cancelled, fired,
       UNIX_TIMESTAMP(created_at) + 0e0 AS created_at_s, UNIX_TIMESTAMP(settled_at) + 0e0 AS settled_at_s
FROM forkq_batches WHERE id = %(id)s;

-- name: batch_open_list
-- The chore's look at open batches, oldest first: one that no finishing job settled (its
-- last jobs ended through a path without the hook: a cancel, a master's write).
SELECT id FROM forkq_batches FORCE INDEX (forkq_batches_open)
WHERE settled_at IS NULL AND sealed = 1 ORDER BY id LIMIT %(limit)s;

-- name: batch_jobs
SELECT id, handler, status, attempts, max_attempts, last_error FROM forkq_jobs FORCE INDEX (forkq_jobs_batch)
WHERE batch_id = %(id)s ORDER BY id LIMIT %(limit)s;

-- Schema upgrades: `upgrade_to_N` runs once on a database at version N-1 (`forkq schema apply`).
-- Each holds everything version N adds (new tables included), one statement a line ending
-- in `;`, and records version N last: `forkq schema print --upgrade-from M` prints exactly
-- these, for teams whose migrations are reviewed SQL files. Every statement can run again
-- (IF [NOT] EXISTS), so an upgrade stopped half way (a lost connection, Ctrl-C, a metadata
-- lock waited on too long) is finished by the next apply instead of failing on what the
-- first one did.

-- name: upgrade_to_2
-- Version 2 drops the lease index: expired leases are found through forkq_jobs_status.
ALTER TABLE forkq_jobs DROP INDEX IF EXISTS forkq_jobs_lease;
UPDATE forkq_schema SET version = 2, applied_at = NOW(6) WHERE id = 1 AND version < 2;

-- name: upgrade_to_3
-- Version 3 adds the status `scheduled` (a job due later, made ready when due). Only the
-- column comment changes: ALGORITHM=INSTANT edits metadata and never rebuilds the table
-- (a server that cannot do it refuses instead), and running it twice changes nothing.
ALTER TABLE forkq_jobs MODIFY status VARCHAR(16) NOT NULL DEFAULT 'ready' COMMENT 'ready | scheduled | running | done | dead', ALGORITHM=INSTANT;
UPDATE forkq_schema SET version = 3, applied_at = NOW(6) WHERE id = 1 AND version < 3;

-- name: upgrade_to_4
-- Version 4 adds forkq_processes.node: which machine and pid namespace a process lives in,
-- so a master judges by pid only the rows of its own node. Rows written before have none.
ALTER TABLE forkq_processes ADD COLUMN IF NOT EXISTS node VARCHAR(64) NULL DEFAULT NULL COMMENT 'kernel boot id and pid namespace (proc.node_id); a master judges by pid only rows of its own node; NULL in rows written before version 4';
UPDATE forkq_schema SET version = 4, applied_at = NOW(6) WHERE id = 1 AND version < 4;

-- name: upgrade_to_5
-- Version 5 adds forkq_jobs.limit_key (flow control; an instant change, no table copy)
-- and forkq_throughput (jobs finished per minute, the dashboard's chart).
ALTER TABLE forkq_jobs ADD COLUMN IF NOT EXISTS limit_key VARCHAR(191) NULL DEFAULT NULL COMMENT 'the bucket of a [limits.NAME] with per_key: e.g. a tenant; NULL shares one bucket', ALGORITHM=INSTANT;
CREATE TABLE IF NOT EXISTS forkq_throughput (
  minute       TIMESTAMP(6) NOT NULL COMMENT 'the minute the counts are for (UTC, database clock)',
  queue        VARCHAR(64)  NOT NULL COMMENT 'queue name',
  host         VARCHAR(255) NOT NULL COMMENT 'the host whose workers finished them',
  done         INT          NOT NULL DEFAULT 0 COMMENT 'jobs that succeeded',
  failed       INT          NOT NULL DEFAULT 0 COMMENT 'attempts that failed (retried or dead)',
  PRIMARY KEY (minute, queue, host)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq jobs finished per minute, per queue and host (the dashboard''s chart); pruned after a day';
UPDATE forkq_schema SET version = 5, applied_at = NOW(6) WHERE id = 1 AND version < 5;

-- name: upgrade_to_6
-- Version 6 adds forkq_results: task results of the Django Tasks backend, kept for the
-- pool's retention after the job itself is gone. A new table: nothing else is touched.
CREATE TABLE IF NOT EXISTS forkq_results (
  job_id       BIGINT UNSIGNED NOT NULL COMMENT 'the job (forkq_jobs.id) this is the result of: a Django TaskResult id (supervisor.contrib.django)',
  queue        VARCHAR(64)  NOT NULL COMMENT 'the job''s queue: the result is pruned with its pool''s retention',
  status       VARCHAR(16)  NOT NULL COMMENT 'how the latest recorded attempt ended: succeeded | failed',
  payload      LONGTEXT     NOT NULL COMMENT 'the job''s payload (JSON), kept for the result once the job row is gone',
  return_value LONGTEXT     NULL COMMENT 'JSON text of what the task returned (status succeeded)',
  errors       LONGTEXT     NOT NULL COMMENT 'JSON list, one object per failed attempt: attempt, exception class path, traceback',
  workers      TEXT         NOT NULL COMMENT 'JSON list of the workers (host:pid) of the recorded attempts, in order',
  enqueued_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when the job was enqueued',
  started_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when the first recorded attempt started',
  attempted_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when the latest recorded attempt started',
  finished_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when the latest recorded attempt ended; retention counts from here',
  PRIMARY KEY (job_id),
  KEY forkq_results_finished (queue, finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq task results (the Django Tasks backend): one row per job, written at the end of each attempt';
UPDATE forkq_schema SET version = 6, applied_at = NOW(6) WHERE id = 1 AND version < 6;

-- name: upgrade_to_7
-- Version 7 adds flow control and Snooze: forkq_jobs.snoozes and forkq_jobs.limit_wait (an
-- instant change, no table copy), the index that claims under a limit read (built online:
-- reads and writes go on while it is built), and forkq_limits, one row per limit bucket.
ALTER TABLE forkq_jobs ADD COLUMN IF NOT EXISTS snoozes INT NOT NULL DEFAULT 0 COMMENT 'times its handler asked to run it later (Snooze) without using an attempt; past the handler''s max_snoozes it ends dead', ADD COLUMN IF NOT EXISTS limit_wait VARCHAR(256) NOT NULL DEFAULT '' COMMENT 'the limit bucket (NAME, or NAME/KEY with per_key) this ready job waits on: not claimed until that bucket has room; empty when claimable', ALGORITHM=INSTANT;
ALTER TABLE forkq_jobs ADD INDEX IF NOT EXISTS forkq_jobs_limit (status, limit_wait, queue, priority DESC, run_at, id), ALGORITHM=INPLACE, LOCK=NONE;
CREATE TABLE IF NOT EXISTS forkq_limits (
  name          VARCHAR(64)  NOT NULL COMMENT 'the [limits.NAME] this bucket belongs to',
  limit_key     VARCHAR(191) NOT NULL DEFAULT '' COMMENT 'the jobs'' limit_key for a per_key limit; empty for the one bucket of a limit without per_key (and for jobs without a key)',
  rate_slice_us BIGINT       NULL DEFAULT NULL COMMENT 'length of one rate slice in microseconds (a tenth of the rate''s period); NULL without a rate',
  rate_base     BIGINT       NULL DEFAULT NULL COMMENT 'number of the oldest slice counted (database clock in microseconds / rate_slice_us)',
  rate_counts   VARCHAR(255) NULL DEFAULT NULL COMMENT 'jobs started in each slice from rate_base on, comma-separated (12 slices: the period, one more and the slice now running; earlier code wrote 11)',
  running_counted INT        NULL DEFAULT NULL COMMENT 'the bucket''s running jobs as last counted in forkq_jobs (under this row''s lock); NULL: never counted',
  running_added INT          NOT NULL DEFAULT 0 COMMENT 'jobs claimed into the bucket since that count: counted + added bounds its running jobs from above, so a claim far from the limit need not count them',
  wake_at       TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when claims look again at the jobs parked on this bucket (forkq_jobs.limit_wait); NULL when none are',
  updated_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'the last claim or unpark that wrote this row',
  PRIMARY KEY (name, limit_key),
  KEY forkq_limits_wake (wake_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq flow control: one row per [limits.NAME] bucket; claims lock it to decide, so no limit is exceeded across hosts';
UPDATE forkq_schema SET version = 7, applied_at = NOW(6) WHERE id = 1 AND version < 7;

-- name: upgrade_to_8
-- Version 8 adds fair share within a queue: forkq_jobs.group_key and the generated column
-- tenant (instant changes, no table copy; a virtual column is added alone), the index of
-- fair claims (built online: reads and writes go on), and forkq_tenants; and the
-- dashboard's forkq_jobs.tags and .progress, added with group_key: after an indexed
-- virtual column MariaDB adds no column instantly (error 1845).
ALTER TABLE forkq_jobs ADD COLUMN IF NOT EXISTS group_key VARCHAR(191) NULL DEFAULT NULL COMMENT 'the tenant of the job in a fair pool ([pools.X] fair = true): tenants take turns at the queue; NULL: its limit_key is its tenant', ADD COLUMN IF NOT EXISTS tags TEXT NULL DEFAULT NULL COMMENT 'JSON list of strings given at enqueue (tags=[...]), for the dashboard''s tag:NAME search; NULL: none', ADD COLUMN IF NOT EXISTS progress VARCHAR(400) NULL DEFAULT NULL COMMENT 'JSON object of percent, message and at (epoch seconds): what its handler last reported (job.progress, or a command''s forkq-progress: line), at most one write a second; NULL: none', ALGORITHM=INSTANT;
ALTER TABLE forkq_jobs ADD COLUMN IF NOT EXISTS tenant VARCHAR(191) AS (COALESCE(group_key, limit_key, '')) VIRTUAL COMMENT 'generated, never written: the job''s tenant in a fair pool (group_key, else limit_key, else empty)', ALGORITHM=INSTANT;
ALTER TABLE forkq_jobs ADD INDEX IF NOT EXISTS forkq_jobs_tenant (queue, status, tenant, priority DESC, run_at, id), ALGORITHM=INPLACE, LOCK=NONE;
CREATE TABLE IF NOT EXISTS forkq_tenants (
  queue        VARCHAR(64)  NOT NULL COMMENT 'a queue of a fair pool',
  tenant       VARCHAR(191) NOT NULL COMMENT 'a tenant with jobs in that queue (forkq_jobs.tenant)',
  last_served  BIGINT       NOT NULL DEFAULT 0 COMMENT 'database clock in microseconds when a claim last took the tenant''s head job; 0: never, served first',
  PRIMARY KEY (queue, tenant),
  KEY forkq_tenants_turn (queue, last_served, tenant)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq fair share: the round-robin cursor of fair queues, one row per tenant with ready jobs; a claim serves the least recently served first and deletes the row of a tenant it finds with no job ready or running';
UPDATE forkq_schema SET version = 8, applied_at = NOW(6) WHERE id = 1 AND version < 8;

-- name: upgrade_to_9
-- Version 9 adds forkq_schedules: schedules added at runtime (`forkq schedule add`).
CREATE TABLE IF NOT EXISTS forkq_schedules (
  name         VARCHAR(64)  NOT NULL COMMENT 'the schedule added at runtime (forkq schedule add NAME); a [schedules.NAME] of the config file of the same name is the file''s and this row is ignored',
  cron         VARCHAR(255) NOT NULL COMMENT 'the cron expression (five fields, or six with seconds)',
  handler      VARCHAR(191) NOT NULL COMMENT 'the handler of the jobs it enqueues',
  queue        VARCHAR(64)  NULL DEFAULT NULL COMMENT 'the queue of its jobs; NULL: the handler''s registered queue',
  timezone     VARCHAR(64)  NOT NULL DEFAULT 'UTC' COMMENT 'the IANA time zone the cron expression is read in',
  payload      TEXT         NOT NULL COMMENT 'JSON object: the payload of every job it enqueues',
  priority     INT          NOT NULL DEFAULT 0 COMMENT 'the priority of its jobs',
  misfire      VARCHAR(16)  NOT NULL DEFAULT 'once' COMMENT 'once | skip: what slots missed while no host ran do on recovery',
  paused       TINYINT      NOT NULL DEFAULT 0 COMMENT '1: no slot is enqueued until resumed',
  since        TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'slots due before this are never run: set when added and when resumed (database clock)',
  changed_by   VARCHAR(191) NULL DEFAULT NULL COMMENT 'who last added, paused or resumed it (user@host, or the dashboard''s client)',
  updated_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when it was last changed',
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq schedules added at runtime, beside the config file''s [schedules.NAME]; their slots are recorded in forkq_schedule_slots like the file''s';
UPDATE forkq_schema SET version = 9, applied_at = NOW(6) WHERE id = 1 AND version < 9;

-- name: upgrade_to_10
-- Version 10 adds uniqueness windows and scopes: forkq_jobs.unique_for, .unique_while,
-- .duplicates and the stored generated column unique_live, whose UNIQUE index with
-- unique_key (forkq_jobs_unique) replaces forkq_jobs_unique_key. A table copy
-- (ALGORITHM=COPY: reads go on, writes wait): no column is added instantly after the
-- indexed virtual column tenant (error 1845), and a stored column is computed for each
-- row. Its time grows with the table: prune or archive finished jobs first.
ALTER TABLE forkq_jobs
  ADD COLUMN IF NOT EXISTS unique_for   INT UNSIGNED NULL DEFAULT NULL COMMENT 'with unique_key: the window in seconds: one job per key per window of this length (aligned on the epoch, counted from enqueued_at); NULL: no window',
  ADD COLUMN IF NOT EXISTS unique_while VARCHAR(8)   NULL DEFAULT NULL COMMENT 'with unique_key: which of its states hold the key: queued (scheduled, ready or waiting, whatever its attempts) | active (also running) | kept (any state, while the row is kept); NULL: kept',
  ADD COLUMN IF NOT EXISTS duplicates   INT          NOT NULL DEFAULT 0 COMMENT 'later enqueues of its unique key that conflicted with it (skipped, replaced or debounced into it)',
  ADD COLUMN IF NOT EXISTS unique_live  BIGINT AS (CASE WHEN unique_key IS NULL THEN NULL WHEN unique_while = 'queued' AND status NOT IN ('scheduled', 'ready', 'waiting') THEN NULL WHEN unique_while = 'active' AND status NOT IN ('scheduled', 'ready', 'waiting', 'running', 'cancelling') THEN NULL WHEN unique_for > 0 THEN FLOOR(UNIX_TIMESTAMP(enqueued_at) / unique_for) ELSE 0 END) STORED COMMENT 'generated, never written: the window its unique_key holds (0 without unique_for) while its state holds the key (unique_while), else NULL, which never collides',
  DROP INDEX IF EXISTS forkq_jobs_unique_key,
  ADD UNIQUE KEY IF NOT EXISTS forkq_jobs_unique (unique_key, unique_live),
  ADD CONSTRAINT IF NOT EXISTS forkq_jobs_unique_while CHECK (unique_while IN ('queued', 'active', 'kept')),
  ALGORITHM=COPY;
UPDATE forkq_schema SET version = 10, applied_at = NOW(6) WHERE id = 1 AND version < 10;
-- name: upgrade_to_14
-- Version 14 adds dependencies (depends_on): forkq_dependencies, the status `waiting` (a
-- comment), and forkq_jobs.deps, the flag that sends a parent's end through the release
-- of its children while every other job's end stays one statement. No table copy: MariaDB
-- adds no column instantly after version 8's indexed virtual column (1845), so the
-- virtual column `tenant` is dropped with its index and added again after `deps`
-- (instant changes), and the index is built again online (reads and writes go on; a fair
-- pool's claims, which force that index, fail until it is back: seconds per million rows).
ALTER TABLE forkq_jobs DROP INDEX IF EXISTS forkq_jobs_tenant, ALGORITHM=INPLACE, LOCK=NONE;
ALTER TABLE forkq_jobs DROP COLUMN IF EXISTS tenant, ALGORITHM=INSTANT;
ALTER TABLE forkq_jobs ADD COLUMN IF NOT EXISTS deps TINYINT NOT NULL DEFAULT 0 COMMENT 'dependencies (forkq_dependencies): 1 = jobs wait on this one, so ending it releases or cancels them; 2 = it was enqueued with parents; 3 = both; 0 (most jobs) = neither: its end touches no other table', MODIFY status VARCHAR(16) NOT NULL DEFAULT 'ready' COMMENT 'waiting | ready | scheduled | running | cancelling | done | dead | cancelled; waiting: on a parent (forkq_dependencies), never claimed', ALGORITHM=INSTANT;
ALTER TABLE forkq_jobs ADD COLUMN IF NOT EXISTS tenant VARCHAR(191) AS (COALESCE(group_key, limit_key, '')) VIRTUAL COMMENT 'generated, never written: the job''s tenant in a fair pool (group_key, else limit_key, else empty)', ALGORITHM=INSTANT;
ALTER TABLE forkq_jobs ADD INDEX IF NOT EXISTS forkq_jobs_tenant (queue, status, tenant, priority DESC, run_at, id), ALGORITHM=INPLACE, LOCK=NONE;
CREATE TABLE IF NOT EXISTS forkq_dependencies (
  parent_id    BIGINT UNSIGNED NOT NULL COMMENT 'the job that must end first (forkq_jobs.id; the row may be gone once it ended)',
  child_id     BIGINT UNSIGNED NOT NULL COMMENT 'the job enqueued with depends_on: waiting until every parent is done',
  on_parent_failure VARCHAR(8) NOT NULL DEFAULT 'cancel' COMMENT 'cancel | continue: what the parent ending dead or cancelled does to the child',
  PRIMARY KEY (parent_id, child_id),
  KEY forkq_dependencies_child (child_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq dependencies: one row per parent of a job enqueued with depends_on; the transaction that ends a parent releases (or cancels) its waiting children';
UPDATE forkq_schema SET version = 14, applied_at = NOW(6) WHERE id = 1 AND version < 14;
-- name: upgrade_to_18
-- Version 18: the three indexes that held `status` for one kind of job only (limits, fair
-- pools, batches) were rewritten by every claim and every end, of every job. They now
-- index virtual columns (ready_wait, ready_tenant, batch_status) that stay NULL where the
-- job needs no entry, and InnoDB leaves an index alone when none of its values changed: a
-- plain job's claim moves two entries and its end none (a no-op drain: 0.82x -> 0.98x of
-- d1f5da8's rate, benchmarks/RESULTS.md). The indexes are dropped, the columns added (instant: no indexed
-- virtual column is left to prevent it, error 1845) and the indexes built again online.
-- Stop the daemons first: claims under [limits] and in fair pools force these indexes.
-- IF (NOT) EXISTS: an upgrade stopped after any of the three (the index build takes its
-- time) is finished by the next apply, which would otherwise fail on the first.
ALTER TABLE forkq_jobs DROP INDEX IF EXISTS forkq_jobs_limit, DROP INDEX IF EXISTS forkq_jobs_tenant, DROP INDEX IF EXISTS forkq_jobs_batch, ALGORITHM=INPLACE, LOCK=NONE;
ALTER TABLE forkq_jobs ADD COLUMN IF NOT EXISTS ready_wait VARCHAR(256) AS (IF(status = 'ready', limit_wait, NULL)) VIRTUAL COMMENT 'generated, never written: limit_wait while ready, else NULL (index forkq_jobs_limit: a claim moves the entry once, an end not at all)', ADD COLUMN IF NOT EXISTS ready_tenant VARCHAR(191) AS (IF(status = 'ready', COALESCE(group_key, limit_key, ''), NULL)) VIRTUAL COMMENT 'generated, never written: the tenant while ready, else NULL (index forkq_jobs_tenant: a claim moves the entry once, an end not at all)', ADD COLUMN IF NOT EXISTS batch_status VARCHAR(16) AS (IF(batch_id IS NULL, NULL, status)) VIRTUAL COMMENT 'generated, never written: status for a job in a batch, else NULL (index forkq_jobs_batch: no entry changes for a job in none)', ALGORITHM=INSTANT;
ALTER TABLE forkq_jobs ADD INDEX IF NOT EXISTS forkq_jobs_limit (ready_wait, queue, priority DESC, run_at, id), ADD INDEX IF NOT EXISTS forkq_jobs_tenant (queue, ready_tenant, priority DESC, run_at, id), ADD INDEX IF NOT EXISTS forkq_jobs_batch (batch_id, batch_status), ALGORITHM=INPLACE, LOCK=NONE;
UPDATE forkq_schema SET version = 18, applied_at = NOW(6) WHERE id = 1 AND version < 18;
-- name: upgrade_to_19
-- Version 19 drops forkq_jobs_claim (queue, status, priority, run_at, id): claims read
-- forkq_jobs_limit's ready range, in the same order, and every claim moved an entry of
-- both, every end deleted both (a no-op drain wrote 16% fewer pages a job without it,
-- benchmarks/RESULTS.md). Queue names are walked on forkq_jobs_tenant (queue first).
-- Dropping an index is instant (no copy, no rebuild). Code of an older release forces
-- forkq_jobs_claim in its claims: stop its daemons and `forkq work` first.
ALTER TABLE forkq_jobs DROP INDEX IF EXISTS forkq_jobs_claim, ALGORITHM=INPLACE, LOCK=NONE;
UPDATE forkq_schema SET version = 19, applied_at = NOW(6) WHERE id = 1 AND version < 19;
-- name: upgrade_to_17
-- Version 17 changes SQLite's forkq_jobs_unique and forkq_jobs_limit only (partial
-- indexes): here it records the version.
UPDATE forkq_schema SET version = 17, applied_at = NOW(6) WHERE id = 1 AND version < 17;
-- name: upgrade_to_16
-- Version 16 changes SQLite's forkq_jobs_tenant only (a partial index, which MariaDB
-- does not have): here it records the version.
UPDATE forkq_schema SET version = 16, applied_at = NOW(6) WHERE id = 1 AND version < 16;
-- name: upgrade_to_15
-- Version 15 adds forkq_tenants.served: a fair pool's weights (an instant column of a
-- small table).
ALTER TABLE forkq_tenants ADD COLUMN IF NOT EXISTS served INT NOT NULL DEFAULT 0 COMMENT 'jobs claimed in the tenant''s turn so far (a pool''s weights: a tenant of weight N keeps its turn for N claims)';
UPDATE forkq_schema SET version = 15, applied_at = NOW(6) WHERE id = 1 AND version < 15;
-- name: upgrade_to_13
-- Version 13 adds batches: forkq_batches and forkq_jobs.batch_id under an index. On
-- MariaDB the column cannot be added instantly after version 8's indexed virtual column
-- (1845): this ALTER rebuilds forkq_jobs (online where the server can: enqueues and claims go
-- on, but it takes the time of a copy of the table).
CREATE TABLE IF NOT EXISTS forkq_batches (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'batch id (forkq_jobs.batch_id of its jobs)',
  callbacks    TEXT         NOT NULL COMMENT 'JSON object: for each of success, complete and dead it has, the callback''s handler and queue',
  payload      LONGTEXT     NOT NULL COMMENT 'JSON given to every callback job, under "payload"',
  total        INT          NOT NULL DEFAULT 0 COMMENT 'jobs enqueued in the batch (set when its with-block ends)',
  sealed       TINYINT      NOT NULL DEFAULT 0 COMMENT '1 once its with-block ended: no callback fires before',
  created_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when the batch was opened',
  settled_at   TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when its last job ended and its callbacks were enqueued; NULL: still open',
  done         INT          NULL DEFAULT NULL COMMENT 'jobs that ended done, counted when it settled',
  dead         INT          NULL DEFAULT NULL COMMENT 'jobs that ended dead, counted when it settled',
  cancelled    INT          NULL DEFAULT NULL COMMENT 'jobs that ended cancelled, counted when it settled',
  fired        TEXT         NULL COMMENT 'JSON object: the id of each callback job enqueued when it settled, by event',
  PRIMARY KEY (id),
  KEY forkq_batches_open (settled_at, id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq batches (q.batch()): callbacks enqueued once when every job of the batch has ended';
ALTER TABLE forkq_jobs
  ADD COLUMN IF NOT EXISTS batch_id BIGINT UNSIGNED NULL DEFAULT NULL COMMENT 'the forkq_batches row of the batch it belongs to (q.batch()); NULL: in none',
  ADD KEY IF NOT EXISTS forkq_jobs_batch (batch_id, status);
UPDATE forkq_schema SET version = 13, applied_at = NOW(6) WHERE id = 1 AND version < 13;
-- name: upgrade_to_11
-- Version 11 adds forkq_handler_stats (attempts per minute, handler and host, with a duration
-- histogram: the dashboard's per-handler timing). A new table: nothing else is touched.
CREATE TABLE IF NOT EXISTS forkq_handler_stats (
  minute       TIMESTAMP(6) NOT NULL COMMENT 'the minute the attempts ended in (UTC, database clock)',
  handler      VARCHAR(191) NOT NULL COMMENT 'handler name',
  host         VARCHAR(255) NOT NULL COMMENT 'the host whose workers ran them',
  jobs         INT          NOT NULL DEFAULT 0 COMMENT 'attempts that ended (done, failed or snoozed)',
  failed       INT          NOT NULL DEFAULT 0 COMMENT 'attempts that failed (retried, dead or timed out)',
  seconds      DOUBLE       NOT NULL DEFAULT 0 COMMENT 'their total duration',
  fastest      DOUBLE       NULL COMMENT 'the shortest attempt (seconds)',
  slowest      DOUBLE       NULL COMMENT 'the longest attempt (seconds)',
  b00          INT          NOT NULL DEFAULT 0 COMMENT 'attempts under 1 ms',
  b01          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 1 ms to 2 ms',
  b02          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 2 ms to 4 ms',
  b03          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 4 ms to 8 ms',
  b04          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 8 ms to 16 ms',
  b05          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 16 ms to 32 ms',
  b06          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 32 ms to 64 ms',
  b07          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 64 ms to 128 ms',
  b08          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 128 ms to 256 ms',
  b09          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 256 ms to 512 ms',
  b10          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 512 ms to 1.024 s',
  b11          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 1.024 s to 2.048 s',
  b12          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 2.048 s to 4.096 s',
  b13          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 4.096 s to 8.192 s',
  b14          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 8.192 s to 16.384 s',
  b15          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 16.384 s to 32.768 s',
  b16          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 32.768 s to 65.536 s',
  b17          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 65.536 s to 131.072 s',
  b18          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 131.072 s to 262.144 s',
  b19          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 262.144 s to 524.288 s',
  b20          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 524.288 s to 1048.58 s',
  b21          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 1048.58 s to 2097.15 s',
  b22          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 2097.15 s to 4194.3 s',
  b23          INT          NOT NULL DEFAULT 0 COMMENT 'attempts of 4194.3 s or more',
  PRIMARY KEY (minute, handler, host),
  KEY forkq_handler_stats_handler (handler, minute)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq attempts per minute, handler and host: counts and a duration histogram, bNN = attempts of 2^(NN-1) to 2^NN ms (b00 under 1 ms); pruned after a day';
UPDATE forkq_schema SET version = 11, applied_at = NOW(6) WHERE id = 1 AND version < 11;
-- name: upgrade_to_12
-- Version 12 adds forkq_attempts: the attempts of a job that did not end in its success.
CREATE TABLE IF NOT EXISTS forkq_attempts (
  job_id       BIGINT UNSIGNED NOT NULL COMMENT 'the job (forkq_jobs.id) this attempt was of',
  slot         SMALLINT     NOT NULL COMMENT 'attempt modulo 20: a job keeps its last 20 attempts, a later one takes the slot of an older one',
  attempt      INT          NOT NULL COMMENT 'the attempt''s number (forkq_jobs.attempts when it ran)',
  queue        VARCHAR(64)  NOT NULL COMMENT 'the job''s queue: rows are pruned with its pool''s retention',
  outcome      VARCHAR(16)  NOT NULL COMMENT 'how it ended: retry | dead | timeout | died (its worker was killed or vanished) | lease_expired',
  worker       VARCHAR(191) NULL DEFAULT NULL COMMENT 'the lease owner that ran it (host:pid:token)',
  host         VARCHAR(191) NULL DEFAULT NULL COMMENT 'the host that ran it',
  pid          INT          NULL DEFAULT NULL COMMENT 'the worker process that ran it',
  error        TEXT         NULL DEFAULT NULL COMMENT 'what it failed with, cut to 2,000 characters',
  started_at   TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when its handler started (NULL: before it started)',
  ended_at     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when its end was recorded; retention counts from here',
  PRIMARY KEY (job_id, slot),
  KEY forkq_attempts_ended (queue, ended_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq attempt history: one row per attempt that did not end in the job''s success (a success is the job row''s own)';
UPDATE forkq_schema SET version = 12, applied_at = NOW(6) WHERE id = 1 AND version < 12;
