"""A module of the app that nothing imports. Importing it leaves a mark (the file named by
FORKQ_DJANGO_IMPORT_MARK): the tests prove a job row naming its task cannot import it."""

import os
from pathlib import Path

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

MARK = os.environ.get("FORKQ_DJANGO_IMPORT_MARK")
if MARK:
    Path(MARK).write_text(f"imported by pid {os.getpid()}\n", encoding="utf-8")


@task
def run():
    if MARK:
        Path(MARK).write_text("ran\n", encoding="utf-8")
