"""The name of every event forkq logs: the code emits these constants, and tests look for them.

Emitters and tests both use these constants, so renaming an event renames it in both:
a test that asserts an event did NOT happen can never pass silently because the event
was renamed. tests/unit/test_events.py reads supervisor/ and checks that every log call
passes one of these (never a string literal) and that every one is emitted.
"""

from __future__ import annotations

# --- the master: boot, reload, stop ------------------------------------------------------
MASTER_STARTED = "master_started"
MASTER_CRASHED = "master_crashed"
MASTER_STOPPING = "master_stopping"
MASTER_STOPPED = "master_stopped"
ALREADY_STOPPING = "already_stopping"
CONFIG_RELOADED = "config_reloaded"
RELOAD_REFUSED = "reload_refused"
HANDLER_QUEUE_UNSERVED = "handler_queue_unserved"
SCHEDULE_HANDLER_UNKNOWN = "schedule_handler_unknown"
AFTER_ATTEMPT_FAILED = "after_attempt_failed"  # what a handler left to run at its end raised
LIBRARY_LOG = "library_log"  # a library's own logging record (logs.route_stdlib)
QUEUE_UNSERVED = "queue_unserved"  # ready jobs, and no pool of this config serves the queue

# --- several databases: the supervisor and its masters (daemon/federation.py) ------------
SUPERVISOR_STARTED = "supervisor_started"
SUPERVISOR_STOPPING = "supervisor_stopping"
SUPERVISOR_STOPPED = "supervisor_stopped"
MASTER_FORKED = "master_forked"
MASTER_NOT_STARTED = "master_not_started"
MASTER_EXITED = "master_exited"
MASTER_REFUSED = "master_refused"
MASTER_UNRESPONSIVE = "master_unresponsive"

# --- pools and children -----------------------------------------------------------------
POOL_RESIZED = "pool_resized"
POOL_CRASH_LOOP = "pool_crash_loop"
CHILD_SPAWNED = "child_spawned"
CHILD_EXITED = "child_exited"
CHILD_CRASHED = "child_crashed"
CHILD_FAILED_AT_START = "child_failed_at_start"
CHILD_KILLED_AT_SHUTDOWN = "child_killed_at_shutdown"
CHILD_IGNORED_RETIRE = "child_ignored_retire"
MEMORY_LIMIT_TOO_LOW = "memory_limit_too_low"
ORPHAN_KILLED = "orphan_killed"
STRAY_KILLED = "stray_killed"
STALE_PROCESSES_SETTLED = "stale_processes_settled"

# --- jobs as the master and the workers see them ----------------------------------------
JOB_TIMED_OUT = "job_timed_out"
JOB_SETTLED = "job_settled"
JOB_CANCELLED = "job_cancelled"
JOB_CANCEL_KILL = "job_cancel_kill"
JOB_FINISHED = "job_finished"
JOB_LEFTOVERS_KILLED = "job_leftovers_killed"
JOB_SNOOZED_TOO_OFTEN = "job_snoozed_too_often"
JOB_SUPERSEDED = "job_superseded"  # its move back into the queue met its unique key held
JOBS_HANDED_BACK = "jobs_handed_back"
HAND_BACK_DROPPED = "hand_back_dropped"
OUTCOME_UNWRITABLE = "outcome_unwritable"  # a failure the store refused: the job ends dead
LEASE_LOST = "lease_lost"
FLUSH_FAILED = "flush_failed"
RELEASE_FAILED = "release_failed"
LOST_CLAIM_RELEASED = "lost_claim_released"  # a claim whose answer was lost had committed
RATE_HOLD_RELEASED = "rate_hold_released"  # held jobs under a rate that could start no more
WORKER_STARTED = "worker_started"
WORKER_STOPPED = "worker_stopped"

# --- command handlers (work/command.py) -------------------------------------------------
COMMAND_KILLED = "command_killed"
COMMAND_OUTPUT = "command_output"
COMMAND_OUTPUT_CAPPED = "command_output_capped"
COMMAND_RETRY_AFTER_IGNORED = "command_retry_after_ignored"
COMMAND_SNOOZE_IGNORED = "command_snooze_ignored"

# --- the database -----------------------------------------------------------------------
DB_UNREACHABLE = "db_unreachable"
DB_CONTENTION = "db_contention"
DB_CALL_FAILED = "db_call_failed"
DB_REACHABLE_AGAIN = "db_reachable_again"
DB_RECONNECTED = "db_reconnected"
# A session of `[database] nodes` writes through another Galera node than before (one
# failed or is not Synced; or an earlier one is Synced again): store/galera.py.
DB_NODE_CHANGED = "db_node_changed"

# --- the check tick, chores, schedules, alerts ------------------------------------------
CHECK_TICK = "check_tick"
CHECK_TICK_FAILED = "check_tick_failed"
CHECK_TICK_KILLED = "check_tick_killed"
CHECK_TICK_REPORT_UNREADABLE = "check_tick_report_unreadable"
TICK_CRASHED = "tick_crashed"
CHORES_DONE = "chores_done"
CHORES_SKIPPED = "chores_skipped"
# The chores released or cancelled waiting jobs whose parents' ends missed them (two
# Galera writers at once, an old daemon in a rolling upgrade): store/dependencies.py.
DEPENDENTS_SWEPT = "dependents_swept"
SCHEDULE_ENQUEUED = "schedule_enqueued"
SCHEDULE_INVALID = "schedule_invalid"
SCHEDULES_SKIPPED = "schedules_skipped"
ALERT_SENT = "alert_sent"
ALERT_RESOLVED = "alert_resolved"
ALERT_SEND_FAILED = "alert_send_failed"
ALERT_STATE_NOT_SAVED = "alert_state_not_saved"
ALERT_STATES_UNAVAILABLE = "alert_states_unavailable"

# --- the metrics server -----------------------------------------------------------------
METRICS_SERVING = "metrics_serving"
METRICS_LISTEN_FAILED = "metrics_listen_failed"
METRICS_SCRAPE_FAILED = "metrics_scrape_failed"
METRICS_CHECK_NOT_WRITTEN = "metrics_check_not_written"
METRICS_SERVER_CRASHED = "metrics_server_crashed"
METRICS_SERVER_EXITED = "metrics_server_exited"
METRICS_SERVER_NOT_STARTED = "metrics_server_not_started"

# --- the same-host wake socket ----------------------------------------------------------
WAKE_SOCKET_BOUND = "wake_socket_bound"
WAKE_SOCKET_OFF = "wake_socket_off"
WAKE_SOCKET_UNAVAILABLE = "wake_socket_unavailable"

# --- the dashboard ----------------------------------------------------------------------
WEB_LISTENING = "web_listening"
WEB_ACTION = "web_action"
WEB_CSRF_REFUSED = "web_csrf_refused"
WEB_DATABASE_ERROR = "web_database_error"
WEB_LOGIN_FAILED = "web_login_failed"

# --- Django (contrib/) ------------------------------------------------------------------
DJANGO_READY = "django_ready"
DJANGO_RESULT_NOT_SAVED = "django_result_not_saved"
DJANGO_RESULT_UNREADABLE = "django_result_unreadable"

# --- results and attempts (store/results.py) ------------------------------------------------
ATTEMPT_NOT_RECORDED = "attempt_not_recorded"
