"""The daemon tests' reader of the log (daemon_util.parse_json_lines): a spliced line fails
the test, except the fragment a SIGKILLed writer leaves where the file crosses a page
(Linux ends such a `write` there; the fault tests kill -9 daemons mid-line)."""

from __future__ import annotations

import pytest
from daemon_util import PAGE, parse_json_lines


def _padding(length: int) -> str:
    """One whole JSON line of `length` characters, its newline included."""
    return '{"p": "' + "x" * (length - 10) + '"}\n'


def test_a_fragment_cut_at_a_page_boundary_is_the_killed_writer_s_and_skipped() -> None:
    fragment = '{"job_id": 980, "handler":'
    text = _padding(PAGE - len(fragment)) + fragment + '{"event": "master_started"}\n'
    assert [e.get("event") for e in parse_json_lines(text)] == [None, "master_started"]


def test_a_splice_anywhere_else_fails() -> None:
    fragment = '{"job_id": 980, "handler":'
    text = _padding(PAGE - len(fragment) - 1) + fragment + '{"event": "master_started"}\n'
    with pytest.raises(AssertionError, match="not one JSON object"):
        parse_json_lines(text)
