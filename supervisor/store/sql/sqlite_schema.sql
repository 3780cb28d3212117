-- forkq schema for SQLite: the same tables and columns as schema.sql (a test checks).
-- Times are REAL seconds since the Unix epoch (UTC); DEFAULT is the current time.
-- Applied alone (`sqlite3 forkq.db < sqlite_schema.sql`) it records its schema version
-- on a new database; an older database keeps its own until `forkq schema apply`.

CREATE TABLE IF NOT EXISTS forkq_jobs (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  queue        TEXT    NOT NULL DEFAULT 'default',
  handler      TEXT    NOT NULL,
  payload      TEXT    NOT NULL,
  status       TEXT    NOT NULL DEFAULT 'ready', -- waiting | ready | scheduled | running | cancelling | done | dead | cancelled
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
  progress     TEXT    NULL, -- JSON object of percent and message and at: its handler's last report
  batch_id     INTEGER NULL, -- the forkq_batches row of its batch (NULL: in none)
  deps         INTEGER NOT NULL DEFAULT 0, -- 1: jobs wait on it; 2: it has parents; 3: both
  -- MariaDB indexes these three (version 18); SQLite has partial indexes and reads none
  ready_wait   TEXT    GENERATED ALWAYS AS (CASE WHEN status = 'ready' THEN limit_wait END) VIRTUAL,
  ready_tenant TEXT    GENERATED ALWAYS AS (CASE WHEN status = 'ready' THEN COALESCE(group_key, limit_key, '') END) VIRTUAL,
  batch_status TEXT    GENERATED ALWAYS AS (CASE WHEN batch_id IS NOT NULL THEN status END) VIRTUAL
);
CREATE INDEX IF NOT EXISTS forkq_jobs_claim ON forkq_jobs (queue, status, priority DESC, run_at, id);
CREATE INDEX IF NOT EXISTS forkq_jobs_status ON forkq_jobs (status, queue, run_at);
CREATE INDEX IF NOT EXISTS forkq_jobs_finished ON forkq_jobs (finished_at);
-- Partial: only ready jobs, the ones a limit's claim, park and wake look for, so a claim
-- drops an entry and an end writes none (version 17).
CREATE INDEX IF NOT EXISTS forkq_jobs_limit
  ON forkq_jobs (status, limit_wait, queue, priority DESC, run_at, id) WHERE status = 'ready';
-- Partial: only ready jobs, the ones a fair claim looks for, so a claim and an end write
-- it no more than an enqueue does (version 16).
CREATE INDEX IF NOT EXISTS forkq_jobs_tenant
  ON forkq_jobs (queue, tenant, priority DESC, run_at, id) WHERE status = 'ready';
-- Partial: a job without a key has no entry, so its claim and end (which change
-- unique_live's inputs) write none (version 17).
CREATE UNIQUE INDEX IF NOT EXISTS forkq_jobs_unique ON forkq_jobs (unique_key, unique_live)
  WHERE unique_key IS NOT NULL;
-- Partial: a job in no batch has no entry, so its claim and end write no more than before.
CREATE INDEX IF NOT EXISTS forkq_jobs_batch ON forkq_jobs (batch_id, status)
  WHERE batch_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS forkq_jobs_archive (
  id           INTEGER PRIMARY KEY,
  queue        TEXT    NOT NULL,
  handler      TEXT    NOT NULL,
  payload      TEXT    NOT NULL,
  status       TEXT    NOT NULL,
  priority     INTEGER NOT NULL,
  run_at       REAL    NOT NULL,
  attempts     INTEGER NOT NULL,
  max_attempts INTEGER NULL,
  unique_key   TEXT    NULL,
  locked_by    TEXT    NULL,
  locked_until REAL    NULL,
  last_error   TEXT    NULL,
  enqueued_at  REAL    NOT NULL,
  started_at   REAL    NULL,
  finished_at  REAL    NULL,
  archived_at  REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);
CREATE INDEX IF NOT EXISTS forkq_jobs_archive_finished ON forkq_jobs_archive (finished_at);

CREATE TABLE IF NOT EXISTS forkq_queues (
  queue        TEXT    NOT NULL PRIMARY KEY,
  paused       INTEGER NOT NULL DEFAULT 0,
  updated_at   REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);

CREATE TABLE IF NOT EXISTS forkq_processes (
  name         TEXT    NOT NULL PRIMARY KEY,
  host         TEXT    NOT NULL,
  pid          INTEGER NOT NULL,
  role         TEXT    NOT NULL,
  pool         TEXT    NULL,
  master       TEXT    NULL,
  started_at   REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  heartbeat_at REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  node         TEXT    NULL -- kernel boot id and pid namespace; NULL in rows written before version 4
);
CREATE INDEX IF NOT EXISTS forkq_processes_heartbeat ON forkq_processes (heartbeat_at);

CREATE TABLE IF NOT EXISTS forkq_locks (
  name         TEXT    NOT NULL PRIMARY KEY,
  owner        TEXT    NULL,
  acquired_at  REAL    NULL,
  expires_at   REAL    NOT NULL DEFAULT 0
);

CREATE TABLE IF NOT EXISTS forkq_schedule_slots (
  schedule     TEXT    NOT NULL,
  slot         REAL    NOT NULL,
  job_id       INTEGER NULL,
  enqueued_at  REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  PRIMARY KEY (schedule, slot)
);

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

CREATE TABLE IF NOT EXISTS forkq_alerts (
  alert_key    TEXT    NOT NULL PRIMARY KEY,
  state        TEXT    NOT NULL DEFAULT 'ok',
  detail       TEXT    NULL,
  since        REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  notified_at  REAL    NULL
);

CREATE TABLE IF NOT EXISTS forkq_throughput (
  minute       REAL    NOT NULL, -- the minute the counts are for (epoch seconds)
  queue        TEXT    NOT NULL,
  host         TEXT    NOT NULL,
  done         INTEGER NOT NULL DEFAULT 0,
  failed       INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (minute, queue, host)
);

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

CREATE TABLE IF NOT EXISTS forkq_results (
  job_id       INTEGER PRIMARY KEY, -- the job this is the result of (supervisor.contrib.django)
  queue        TEXT    NOT NULL,
  status       TEXT    NOT NULL, -- succeeded | failed: how the latest recorded attempt ended
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

CREATE TABLE IF NOT EXISTS forkq_limits (
  name          TEXT    NOT NULL, -- the [limits.NAME]
  limit_key     TEXT    NOT NULL DEFAULT '', -- '' for the shared bucket
  rate_slice_us INTEGER NULL,
  rate_base     INTEGER NULL,
  rate_counts   TEXT    NULL,
  running_counted INTEGER NULL, -- running jobs as last counted; NULL: never
  running_added INTEGER NOT NULL DEFAULT 0, -- claimed since that count (an upper bound with it)
  wake_at       REAL    NULL, -- when claims look again at jobs parked here; NULL when none are
  updated_at    REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0),
  PRIMARY KEY (name, limit_key)
);
CREATE INDEX IF NOT EXISTS forkq_limits_wake ON forkq_limits (wake_at);

CREATE TABLE IF NOT EXISTS forkq_tenants (
  queue        TEXT    NOT NULL, -- a queue of a fair pool
  tenant       TEXT    NOT NULL, -- a tenant with ready jobs there (forkq_jobs.tenant)
  last_served  INTEGER NOT NULL DEFAULT 0, -- microseconds; 0: never served
  served       INTEGER NOT NULL DEFAULT 0, -- jobs claimed in its turn so far (weights)
  PRIMARY KEY (queue, tenant)
);
CREATE INDEX IF NOT EXISTS forkq_tenants_turn ON forkq_tenants (queue, last_served, tenant);

CREATE TABLE IF NOT EXISTS forkq_dependencies (
  parent_id    INTEGER NOT NULL, -- the job that must end first
  child_id     INTEGER NOT NULL, -- the job enqueued with depends_on
  on_parent_failure TEXT NOT NULL DEFAULT 'cancel', -- cancel | continue
  PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX IF NOT EXISTS forkq_dependencies_child ON forkq_dependencies (child_id);
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

CREATE TABLE IF NOT EXISTS forkq_schema (
  id           INTEGER NOT NULL PRIMARY KEY,
  version      INTEGER NOT NULL,
  applied_at   REAL    NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);

-- The version this file creates; kept if the database already records one.
INSERT OR IGNORE INTO forkq_schema (id, version) VALUES (1, 19);
