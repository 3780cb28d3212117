"""How a job is named when queues live in several databases.

Job ids are per database, so a job outside the home database is named `NAME:ID`
(`reports:42`) in the CLI's arguments and output, the dashboard's URLs and the Python
router's answers; a home job keeps its plain id (`42`), as with one database.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from supervisor.config.model import HOME_DATABASE

MAX_JOB_ID = 2**63 - 1  # forkq_jobs.id is a signed 64-bit integer in both databases
REF = re.compile(r"(?:([A-Za-z0-9_]{1,64}):)?([0-9]{1,19})")


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
        raise ValueError(f"expected a job id (42) or DATABASE:ID (reports:42), not {text!r}")
    return JobRef(found[1] or HOME_DATABASE, int(found[2]))
