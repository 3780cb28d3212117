"""Integrations with other frameworks, each behind an optional extra.

`supervisor.contrib.django`: a backend for Django's Tasks framework (`forkq[django]`).
Nothing in the daemon's core imports this package.
"""
