-- forkq schema for MySQL 8.0+ / MariaDB 10.6+: the data contract.
--
-- Idempotent: every statement can run again on a database that already has it
-- (`forkq schema apply` does, and then upgrades older versions). This file alone,
-- applied with the mysql client (`mysql app < schema.sql`), gives a database that
-- `forkq run` accepts: its last statement records the schema version on a new
-- database and leaves an older database's version as it is (upgrade that one with
-- `forkq schema apply`, or the statements `forkq schema print --upgrade-from N` prints).
--
-- Any program can enqueue with one statement; every other column defaults:
--   INSERT INTO forkq_jobs (queue, handler, payload)
--   VALUES ('email', 'email.send', '{"to": "a@example.com"}');
--
-- Times are TIMESTAMP(6): stored in UTC and shown in the session's time_zone, so
-- a client whose session runs in another zone still compares them correctly.
-- forkq's own sessions use time_zone '+00:00'.

CREATE TABLE IF NOT EXISTS forkq_jobs (
  id           BIGINT UNSIGNED NOT NULL AUTO_INCREMENT COMMENT 'job id; the FIFO tie-breaker among equal priority and run_at',
  queue        VARCHAR(64)  NOT NULL DEFAULT 'default' COMMENT 'the queue (business type) whose pool runs this job',
  handler      VARCHAR(191) NOT NULL COMMENT 'registered handler name, e.g. email.send; an unknown name ends the job dead, it is never imported',
  payload      LONGTEXT     NOT NULL COMMENT 'JSON text given to the handler; text that is not JSON ends the job dead',
  status       VARCHAR(16)  NOT NULL DEFAULT 'ready' COMMENT 'waiting | ready | scheduled | running | cancelling | done | dead | cancelled; waiting: on a parent (forkq_dependencies), never claimed',
  priority     INT          NOT NULL DEFAULT 0 COMMENT 'higher runs first within a queue',
  run_at       TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'not claimed before this time (delay, backoff)',
  attempts     INT          NOT NULL DEFAULT 0 COMMENT 'attempts started so far',
  max_attempts INT          NULL DEFAULT NULL COMMENT 'attempts before dead; NULL means the handler''s default (10 unless the handler says)',
  unique_key   VARCHAR(191) NULL DEFAULT NULL COMMENT 'idempotency key: a second enqueue with the same key returns this job''s id while this job holds it (unique_for, unique_while)',
  locked_by    VARCHAR(128) NULL DEFAULT NULL COMMENT 'lease holder (host:pid:token) while running',
  locked_until TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'lease expiry; past it the job returns to ready and the attempt counts',
  last_error   TEXT         NULL COMMENT 'the last failure, kept for retries and dead jobs',
  enqueued_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when the job was enqueued',
  started_at   TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when the latest attempt was claimed',
  finished_at  TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when it became done or dead; retention counts from here',
  limit_key    VARCHAR(191) NULL DEFAULT NULL COMMENT 'the bucket of a [limits.NAME] with per_key: e.g. a tenant; NULL shares one bucket',
  snoozes      INT          NOT NULL DEFAULT 0 COMMENT 'times its handler asked to run it later (Snooze) without using an attempt; past the handler''s max_snoozes it ends dead',
  limit_wait   VARCHAR(256) NOT NULL DEFAULT '' COMMENT 'the limit bucket (NAME, or NAME/KEY with per_key) this ready job waits on: not claimed until that bucket has room; empty when claimable',
  group_key    VARCHAR(191) NULL DEFAULT NULL COMMENT 'the tenant of the job in a fair pool ([pools.X] fair = true): tenants take turns at the queue; NULL: its limit_key is its tenant',
  tags         TEXT         NULL DEFAULT NULL COMMENT 'JSON list of strings given at enqueue (tags=[...]), for the dashboard''s tag:NAME search; NULL: none',
  progress     VARCHAR(400) NULL DEFAULT NULL COMMENT 'JSON object of percent, message and at (epoch seconds): what its handler last reported (job.progress, or a command''s forkq-progress: line), at most one write a second; NULL: none',
  unique_for   INT UNSIGNED NULL DEFAULT NULL COMMENT 'with unique_key: the window in seconds: one job per key per window of this length (aligned on the epoch, counted from enqueued_at); NULL: no window',
  unique_while VARCHAR(8)   NULL DEFAULT NULL COMMENT 'with unique_key: which of its states hold the key: queued (scheduled, ready or waiting, whatever its attempts) | active (also running) | kept (any state, while the row is kept); NULL: kept',
  duplicates   INT          NOT NULL DEFAULT 0 COMMENT 'later enqueues of its unique key that conflicted with it (skipped, replaced or debounced into it)',
  deps         TINYINT      NOT NULL DEFAULT 0 COMMENT 'dependencies (forkq_dependencies): 1 = jobs wait on this one, so ending it releases or cancels them; 2 = it was enqueued with parents; 3 = both; 0 (most jobs) = neither: its end touches no other table',
  tenant       VARCHAR(191) AS (COALESCE(group_key, limit_key, '')) VIRTUAL COMMENT 'generated, never written: the job''s tenant in a fair pool (group_key, else limit_key, else empty)',
  unique_live  BIGINT AS (CASE WHEN unique_key IS NULL THEN NULL WHEN unique_while = 'queued' AND status NOT IN ('scheduled', 'ready', 'waiting') THEN NULL WHEN unique_while = 'active' AND status NOT IN ('scheduled', 'ready', 'waiting', 'running', 'cancelling') THEN NULL WHEN unique_for > 0 THEN FLOOR(UNIX_TIMESTAMP(enqueued_at) / unique_for) ELSE 0 END) STORED COMMENT 'generated, never written: the window its unique_key holds (0 without unique_for) while its state holds the key (unique_while), else NULL, which never collides',
  batch_id     BIGINT UNSIGNED NULL DEFAULT NULL COMMENT 'the forkq_batches row of the batch it belongs to (q.batch()); NULL: in none',
  ready_wait   VARCHAR(256) AS (IF(status = 'ready', limit_wait, NULL)) VIRTUAL COMMENT 'generated, never written: limit_wait while ready, else NULL (index forkq_jobs_limit: a claim moves the entry once, an end not at all)',
  ready_tenant VARCHAR(191) AS (IF(status = 'ready', COALESCE(group_key, limit_key, ''), NULL)) VIRTUAL COMMENT 'generated, never written: the tenant while ready, else NULL (index forkq_jobs_tenant: a claim moves the entry once, an end not at all)',
  batch_status VARCHAR(16)  AS (IF(batch_id IS NULL, NULL, status)) VIRTUAL COMMENT 'generated, never written: status for a job in a batch, else NULL (index forkq_jobs_batch: no entry changes for a job in none)',
  PRIMARY KEY (id),
  UNIQUE KEY forkq_jobs_unique (unique_key, unique_live),
  KEY forkq_jobs_status (status, queue, run_at),
  KEY forkq_jobs_finished (finished_at),
  KEY forkq_jobs_limit (ready_wait, queue, priority DESC, run_at, id),
  KEY forkq_jobs_tenant (queue, ready_tenant, priority DESC, run_at, id),
  KEY forkq_jobs_batch (batch_id, batch_status),
  CONSTRAINT forkq_jobs_unique_while CHECK (unique_while IN ('queued', 'active', 'kept'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq jobs: one row per job';

CREATE TABLE IF NOT EXISTS forkq_jobs_archive (
  id           BIGINT UNSIGNED NOT NULL COMMENT 'the id the job had in forkq_jobs',
  queue        VARCHAR(64)  NOT NULL COMMENT 'as in forkq_jobs',
  handler      VARCHAR(191) NOT NULL COMMENT 'as in forkq_jobs',
  payload      LONGTEXT     NOT NULL COMMENT 'as in forkq_jobs',
  status       VARCHAR(16)  NOT NULL COMMENT 'always done',
  priority     INT          NOT NULL COMMENT 'as in forkq_jobs',
  run_at       TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'as in forkq_jobs',
  attempts     INT          NOT NULL COMMENT 'attempts it took',
  max_attempts INT          NULL DEFAULT NULL COMMENT 'as in forkq_jobs',
  unique_key   VARCHAR(191) NULL DEFAULT NULL COMMENT 'as in forkq_jobs (no longer reserved once archived)',
  locked_by    VARCHAR(128) NULL DEFAULT NULL COMMENT 'the worker that finished it',
  locked_until TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'unused once archived',
  last_error   TEXT         NULL COMMENT 'the last failure before it succeeded',
  enqueued_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'as in forkq_jobs',
  started_at   TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when the successful attempt started',
  finished_at  TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when it finished',
  archived_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when it was moved here',
  PRIMARY KEY (id),
  KEY forkq_jobs_archive_finished (finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq finished jobs of pools with on_success = archive';

CREATE TABLE IF NOT EXISTS forkq_queues (
  queue        VARCHAR(64)  NOT NULL COMMENT 'queue name',
  paused       TINYINT      NOT NULL DEFAULT 0 COMMENT '1 while paused: workers claim nothing from it',
  updated_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'last pause or resume',
  PRIMARY KEY (queue)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq per-queue switches';

CREATE TABLE IF NOT EXISTS forkq_processes (
  name         VARCHAR(128) NOT NULL COMMENT 'host:pid:token; workers hold job leases under this name',
  host         VARCHAR(255) NOT NULL COMMENT 'host name',
  pid          INT          NOT NULL COMMENT 'process id on that host',
  role         VARCHAR(16)  NOT NULL COMMENT 'master | worker',
  pool         VARCHAR(64)  NULL DEFAULT NULL COMMENT 'the pool (queue) a worker serves',
  master       VARCHAR(128) NULL DEFAULT NULL COMMENT 'name of the master that forked this worker',
  started_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when it started',
  heartbeat_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'last sign of life; stale rows are pruned and their jobs settled',
  node         VARCHAR(64)  NULL DEFAULT NULL COMMENT 'kernel boot id and pid namespace (proc.node_id); a master judges by pid only rows of its own node; NULL in rows written before version 4',
  PRIMARY KEY (name),
  KEY forkq_processes_heartbeat (heartbeat_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq masters and workers across all hosts';

CREATE TABLE IF NOT EXISTS forkq_locks (
  name         VARCHAR(191) NOT NULL COMMENT 'lock name',
  owner        VARCHAR(191) NULL DEFAULT NULL COMMENT 'host:pid:token of the holder',
  acquired_at  TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when the holder took it',
  expires_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'past this anyone may take it (database clock)',
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq distributed leases (lock_by / expire_at design)';

CREATE TABLE IF NOT EXISTS forkq_schedule_slots (
  schedule     VARCHAR(64)  NOT NULL COMMENT 'name of [schedules.NAME]',
  slot         TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'the due time this row enqueued (UTC)',
  job_id       BIGINT UNSIGNED NULL DEFAULT NULL COMMENT 'the job enqueued for the slot',
  enqueued_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when',
  PRIMARY KEY (schedule, slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq schedule slots: one row per enqueued slot, so a slot runs once across hosts';

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

CREATE TABLE IF NOT EXISTS forkq_alerts (
  alert_key    VARCHAR(191) NOT NULL COMMENT 'rule:queue, e.g. max_ready:email',
  state        VARCHAR(16)  NOT NULL DEFAULT 'ok' COMMENT 'ok | firing',
  detail       TEXT         NULL COMMENT 'JSON: the figure, the threshold, the last message',
  since        TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when the state last changed',
  notified_at  TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when a message was last sent; the cooldown counts from here',
  PRIMARY KEY (alert_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq alert state, shared by the cluster so one message goes out';

CREATE TABLE IF NOT EXISTS forkq_throughput (
  minute       TIMESTAMP(6) NOT NULL COMMENT 'the minute the counts are for (UTC, database clock)',
  queue        VARCHAR(64)  NOT NULL COMMENT 'queue name',
  host         VARCHAR(255) NOT NULL COMMENT 'the host whose workers finished them',
  done         INT          NOT NULL DEFAULT 0 COMMENT 'jobs that succeeded',
  failed       INT          NOT NULL DEFAULT 0 COMMENT 'attempts that failed (retried or dead)',
  PRIMARY KEY (minute, queue, host)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq jobs finished per minute, per queue and host (the dashboard''s chart); pruned after a day';

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

CREATE TABLE IF NOT EXISTS forkq_tenants (
  queue        VARCHAR(64)  NOT NULL COMMENT 'a queue of a fair pool',
  tenant       VARCHAR(191) NOT NULL COMMENT 'a tenant with jobs in that queue (forkq_jobs.tenant)',
  last_served  BIGINT       NOT NULL DEFAULT 0 COMMENT 'database clock in microseconds when a claim last took the tenant''s head job; 0: never, served first',
  served       INT          NOT NULL DEFAULT 0 COMMENT 'jobs claimed in the tenant''s turn so far (a pool''s weights: a tenant of weight N keeps its turn for N claims)',
  PRIMARY KEY (queue, tenant),
  KEY forkq_tenants_turn (queue, last_served, tenant)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq fair share: the round-robin cursor of fair queues, one row per tenant with ready jobs; a claim serves the least recently served first and deletes the row of a tenant it finds with no job ready or running';

CREATE TABLE IF NOT EXISTS forkq_dependencies (
  parent_id    BIGINT UNSIGNED NOT NULL COMMENT 'the job that must end first (forkq_jobs.id; the row may be gone once it ended)',
  child_id     BIGINT UNSIGNED NOT NULL COMMENT 'the job enqueued with depends_on: waiting until every parent is done',
  on_parent_failure VARCHAR(8) NOT NULL DEFAULT 'cancel' COMMENT 'cancel | continue: what the parent ending dead or cancelled does to the child',
  PRIMARY KEY (parent_id, child_id),
  KEY forkq_dependencies_child (child_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq dependencies: one row per parent of a job enqueued with depends_on; the transaction that ends a parent releases (or cancels) its waiting children';
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

CREATE TABLE IF NOT EXISTS forkq_schema (
  id           TINYINT      NOT NULL COMMENT 'always 1',
  version      INT          NOT NULL COMMENT 'schema version applied',
  applied_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when',
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin COMMENT='forkq schema version';

-- The version this file creates; kept if the database already records one.
INSERT IGNORE INTO forkq_schema (id, version) VALUES (1, 19);
