"""The names of the events the daemon logs and the tests look for.

Emitters and tests both use these constants, so renaming an event renames it in both:
a test that asserts an event did NOT happen can never pass silently because the event
was renamed. (tests/unit/test_events.py checks that each one is emitted.)
"""

from __future__ import annotations

MASTER_STARTED = "master_started"
MASTER_CRASHED = "master_crashed"
CONFIG_RELOADED = "config_reloaded"
RELOAD_REFUSED = "reload_refused"
CHILD_SPAWNED = "child_spawned"
CHILD_EXITED = "child_exited"
CHILD_CRASHED = "child_crashed"
CHILD_FAILED_AT_START = "child_failed_at_start"
POOL_CRASH_LOOP = "pool_crash_loop"
CHILD_KILLED_AT_SHUTDOWN = "child_killed_at_shutdown"
CHILD_IGNORED_RETIRE = "child_ignored_retire"
JOB_TIMED_OUT = "job_timed_out"
JOB_SETTLED = "job_settled"
JOB_CANCELLED = "job_cancelled"
JOB_FINISHED = "job_finished"
JOBS_HANDED_BACK = "jobs_handed_back"
HAND_BACK_DROPPED = "hand_back_dropped"
OUTCOME_UNWRITABLE = "outcome_unwritable"  # a failure the store refused: the job ends dead
STALE_PROCESSES_SETTLED = "stale_processes_settled"
CHECK_TICK = "check_tick"
STRAY_KILLED = "stray_killed"
