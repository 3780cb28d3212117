"""What one host does for all, under the chores lease: settling, pruning, promoting
scheduled jobs, schedules and alerts. Never imports the daemon."""
