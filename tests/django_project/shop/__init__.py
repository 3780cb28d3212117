"""The test project's app: its tasks.py is what the daemon runs."""
