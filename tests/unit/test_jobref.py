"""Job references across several databases: `42` is the home database's, `reports:42`."""

from __future__ import annotations

import pytest

from supervisor.config import HOME_DATABASE
from supervisor.jobref import JobRef, format_job_ref, parse_job_ref


def test_home_jobs_keep_their_plain_id_and_others_are_prefixed() -> None:
    assert parse_job_ref("42") == JobRef(HOME_DATABASE, 42)
    assert parse_job_ref(" reports:42 ") == JobRef("reports", 42)
    assert str(JobRef("reports", 7)) == "reports:7" == format_job_ref("reports", 7)
    assert str(JobRef(HOME_DATABASE, 7)) == "7"


@pytest.mark.parametrize("text", ["", "0", "-1", "x", "reports:", ":4", "a-b:4", "9" * 20])
def test_what_is_not_a_job_reference(text: str) -> None:
    with pytest.raises(ValueError, match="expected a job id"):
        parse_job_ref(text)
