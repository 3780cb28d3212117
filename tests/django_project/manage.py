#!/usr/bin/env python
"""The test project's manage.py: `FORKQ_DJANGO_DATABASE_URL=sqlite:////tmp/x.db python
manage.py check` runs Django's checks, ForkqBackend's among them."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forkq_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
