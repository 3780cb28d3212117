"""How a job is named when queues live in several databases.

Job ids are per database, so a job outside the home database is named `NAME:ID`
(`reports:42`) in the CLI's arguments and output, the dashboard's URLs and the Python
router's answers; a home job keeps its plain id (`42`), as with one database.
`Enqueued` (what enqueue returns) is an id that knows its database (models.py names it).
"""

from __future__ import annotations

import re
from typing import NamedTuple

from supervisor.config.model import HOME_DATABASE

MAX_JOB_ID = 2**63 - 1  # forkq_jobs.id is a signed 64-bit integer in both databases
REF = re.compile(r"(?:([A-Za-z0-9_]{1,64}):)?([0-9]{1,19})")
# A Django TaskResult's id (contrib/django_results.result_id_of): JOBID-TOKEN.
DJANGO_RESULT_ID = re.compile(r"([0-9]{1,19})-[0-9a-f]{32}")


class JobRef(NamedTuple):
    database: str
    id: int

    def __str__(self) -> str:
        return format_job_ref(self.database, self.id)


def format_job_ref(database: str, job_id: int) -> str:
    return str(job_id) if database == HOME_DATABASE else f"{database}:{job_id}"


def parse_job_ref(text: str) -> JobRef:
    """`42` (the home database) or `reports:42`; ValueError says what was expected."""
    found = REF.fullmatch(text.strip())
    if found is None or not 0 < int(found[2]) <= MAX_JOB_ID:
        raise ValueError(not_a_job_ref(text))
    return JobRef(found[1] or HOME_DATABASE, int(found[2]))


def not_a_job_ref(text: str) -> str:
    """What to say of a text that names no job; a Django result id is told its job's id
    (the id alone, as the token would not be checked: SQLite can reuse an id)."""
    django = DJANGO_RESULT_ID.fullmatch(text.strip())
    if django is not None:
        return (
            f"{text.strip()!r} is a Django task result's id: its forkq job id is the number"
            f" before the dash ({int(django[1])})"
        )
    return f"expected a job id (42) or DATABASE:ID (reports:42), not {text!r}"


class Enqueued(int):
    """What enqueue returns: a job id (an int, as before), the new job's or, when the
    unique key was held, the id of the job holding it (`conflicted` True, `existing` its id).
    `database`: where it is (ids are per database; HOME_DATABASE is `[database]`)."""

    conflicted: bool
    database: str

    def __new__(
        cls, job_id: int, conflicted: bool = False, database: str = HOME_DATABASE
    ) -> Enqueued:
        made = super().__new__(cls, job_id)
        made.conflicted, made.database = conflicted, database
        return made

    @property
    def ref(self) -> str:
        """Its name in the CLI and the dashboard: `42` (home database) or `reports:42`."""
        return format_job_ref(self.database, int(self))

    id = property(int)

    # Ids are per database: the home job 1 and reports:1 are two jobs (two keys of a
    # dict). Against a plain int it is the int it is, as with one database.
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Enqueued) and other.database != self.database:
            return False
        return int(self) == other

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = int.__hash__

    @property
    def existing(self) -> Enqueued | None:
        """The job the enqueue conflicted with (it holds the unique key); None if new.
        An Enqueued, so it still says its database (a Router asks that one)."""
        return Enqueued(int(self), True, self.database) if self.conflicted else None
