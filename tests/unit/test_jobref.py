"""Job references across several databases: `42` is the home database's, `reports:42`."""

from __future__ import annotations

import subprocess
import sys

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


def test_a_django_result_id_is_told_its_job_id() -> None:
    """A Django TaskResult's id (JOBID-TOKEN) is not taken as the job (the token is not
    checked, and SQLite can reuse an id): the error says which job id it carries."""
    with pytest.raises(ValueError, match=r"Django task result's id: .* before the dash \(24\)"):
        parse_job_ref("24-0123456789abcdef0123456789abcdef")


def test_the_cli_tells_a_django_result_id_its_job_id() -> None:
    for command in ("show", "cancel", "retry"):
        ran = subprocess.run(
            [sys.executable, "-m", "supervisor", command, "24-0123456789abcdef0123456789abcdef"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert ran.returncode == 2, ran
        assert "its forkq job id is the number before the dash (24)" in ran.stderr, ran.stderr
