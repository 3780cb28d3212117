"""Claiming and running jobs: the loop shared by the daemon's pool children and `forkq work`."""
