"""supervisor/work/command.py outside the daemon: real programs (sh, cat, grep), run by
the CommandHandler a `[commands."NAME"]` table registers, as the worker calls it.

What the exit status becomes (done, Fail, Retry with the asked delay, CommandFailed),
the payload on stdin (also to a program that never reads it), the stderr tail in the
error, a program whose grandchild keeps its pipes open, the soft timeout killing the
program's tree, and a program starting with SIGINT at its default even where the
caller ignores it (as a pool child does).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from php_util import php_binary

from supervisor import logs
from supervisor.config import CommandConfig
from supervisor.errors import Fail, JobTimeout, Retry, Snooze
from supervisor.work.command import CommandHandler
from supervisor.work.exits import ERROR_CHARS, CommandFailed
from supervisor.work.guards import soft_timeout
from supervisor.work.pipes import MAX_LOGGED_LINES

pytestmark = pytest.mark.timeout(60)

JOB = SimpleNamespace(id=42, queue="reports", handler="report.pdf", attempts=3)


@pytest.fixture(autouse=True)
def json_logs() -> None:
    logs.setup(json_lines=True)


def run(argv: list[str], payload: Any = None, **table: Any) -> None:
    handler = CommandHandler(CommandConfig(name="report.pdf", argv=tuple(argv), **table))
    handler({} if payload is None else payload, JOB)


def sh(script: str, payload: Any = None) -> None:
    run(["sh", "-c", script], payload)


def events(capsys: pytest.CaptureFixture[str], name: str) -> list[dict[str, Any]]:
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]
    return [e for e in found if e["event"] == name]


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pids"
    yield path
    with contextlib.suppress(FileNotFoundError):
        for word in path.read_text().split():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(int(word))
                if proc.name() in ("sh", "sleep"):
                    proc.kill()


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def test_exit_0_is_done_and_the_payload_arrives_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "stdin"
    payload = {"to": "zoë@example.com", "n": [1, 2.5, None], "nested": {"ok": True}}
    sh(f'cat > "{out}"', payload)
    assert json.loads(out.read_text()) == payload
    assert out.read_text().isascii()


def test_a_large_payload_to_a_program_that_never_reads_it_does_not_deadlock() -> None:
    sh("exit 0", {"blob": "x" * 2_000_000})
    with pytest.raises(CommandFailed, match=r"^exit 3 "):
        sh("sleep 0.2; exit 3", {"blob": "y" * 2_000_000})


def test_the_environment_is_the_tables_and_forkqs_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APP_KEY", "k3y")
    monkeypatch.setenv("FORKQ_DATABASE_URL", "mysql://u:secret@db/app")
    monkeypatch.setenv("UNRELATED", "x")
    monkeypatch.delenv("LC_ALL", raising=False)
    out = tmp_path / "env"
    run(
        ["sh", "-c", f'env > "{out}"'],
        env={"APP_ENV": "test", "APP_KEY": "the table wins"},
        pass_env=("APP_KEY", "HOME"),
    )
    env = dict(line.split("=", 1) for line in out.read_text().splitlines())
    env.pop("PWD", None)  # dash's own
    expected = {"PATH": os.environ["PATH"], "APP_ENV": "test", "APP_KEY": "the table wins"}
    expected |= {k: os.environ[k] for k in ("LANG", "HOME") if k in os.environ}
    expected |= {
        "FORKQ_JOB_ID": "42",
        "FORKQ_QUEUE": "reports",
        "FORKQ_HANDLER": "report.pdf",
        "FORKQ_ATTEMPT": "3",
    }
    assert env == expected


def test_exit_65_is_a_permanent_failure_with_the_stderr_line() -> None:
    with pytest.raises(Fail) as caught:
        sh("echo 'bad payload: no report' >&2; exit 65")
    assert str(caught.value) == "exit 65 (EX_DATAERR): bad payload: no report"


@pytest.mark.parametrize(
    ("last_line", "delay"),
    [("forkq-retry-after: 30", 30.0), ("forkq-retry-after:5m", 300.0), ("", None)],
)
def test_exit_75_asks_for_a_retry_after_the_delay_on_the_last_line(
    last_line: str, delay: float | None
) -> None:
    with pytest.raises(Retry) as caught:
        sh(f"echo 'rate limited' >&2; echo '{last_line}' >&2; exit 75")
    assert caught.value.delay == delay
    assert caught.value.reason == "exit 75 (EX_TEMPFAIL): rate limited"


def test_a_retry_after_line_that_is_not_last_or_not_a_duration_is_only_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(Retry) as caught:
        sh("echo 'forkq-retry-after: 30' >&2; echo 'more' >&2; exit 75")
    assert caught.value.delay is None
    with pytest.raises(Retry) as caught:
        sh("echo 'forkq-retry-after: -4' >&2; exit 75")
    assert caught.value.delay is None
    assert caught.value.reason == "exit 75 (EX_TEMPFAIL): forkq-retry-after: -4"
    [ignored] = events(capsys, "command_retry_after_ignored")
    assert ignored["line"] == "forkq-retry-after: -4"
    with pytest.raises(CommandFailed, match=r"forkq-retry-after: 30$"):
        sh("echo 'forkq-retry-after: 30' >&2; exit 1")  # only exit 75 asks


def test_exit_75_with_forkq_snooze_last_snoozes_without_an_attempt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(Snooze) as caught:
        sh("echo 'the report is not ready yet' >&2; echo 'forkq-snooze: 10m' >&2; exit 75")
    assert caught.value.delay == 600.0
    assert caught.value.reason == "exit 75 (EX_TEMPFAIL): the report is not ready yet"
    with pytest.raises(Retry) as retried:  # not a duration: a plain retry, and said so
        sh("echo 'forkq-snooze: later' >&2; exit 75")
    assert retried.value.delay is None
    [ignored] = events(capsys, "command_snooze_ignored")
    assert ignored["line"] == "forkq-snooze: later"


def test_other_statuses_and_signals_are_failed_attempts() -> None:
    with pytest.raises(CommandFailed) as caught:
        sh("echo one >&2; echo two >&2; exit 1")
    assert str(caught.value) == "exit 1: two\none\ntwo"  # the last line first: the summary
    with pytest.raises(CommandFailed) as caught:
        sh("kill -KILL $$")
    assert str(caught.value) == "killed by SIGKILL (nothing on stderr)"


def test_the_error_keeps_the_end_of_a_long_stderr_without_a_split_character() -> None:
    with pytest.raises(CommandFailed) as caught:
        # 3,000 three-byte characters (9,000 bytes), then the line that says why
        sh(
            "i=0; while [ $i -lt 300 ]; do printf '€€€€€€€€€€' >&2; i=$((i+1)); done;"
            " echo >&2; echo 'the real cause' >&2; exit 2"
        )
    text = str(caught.value)
    assert text.startswith("exit 2: the real cause\n...€")
    assert text.endswith("€\nthe real cause")
    assert "\ufffd" not in text
    assert len(text) <= len("exit 2: the real cause\n...") + ERROR_CHARS <= 4000


def test_the_summary_is_the_last_non_empty_stderr_line() -> None:
    """SPEC: last_error is summarized by the last non-empty line: its first line, which
    status, the jobs list, the dashboard and the log show, is the status and that line."""
    with pytest.raises(CommandFailed) as caught:
        sh(
            "echo 'PHP Deprecated: strftime()' >&2; echo 'Fatal error: out of memory' >&2;"
            " echo '   ' >&2; echo >&2; exit 255"
        )
    text = str(caught.value)
    assert text.splitlines()[0] == "exit 255: Fatal error: out of memory"
    assert "PHP Deprecated: strftime()\nFatal error: out of memory" in text


def test_an_uncaught_php_exception_is_summarized_by_its_fatal_error_line(
    tmp_path: Path,
) -> None:
    """php-cli's commonest failure ends its stderr with `thrown in FILE on line N`: the
    summary is the `PHP Fatal error:  Uncaught ...` line that says why (real php-cli)."""
    script = tmp_path / "job.php"
    script.write_text("<?php\nfunction f() { undefined_fn(); }\nf();\n")
    with pytest.raises(CommandFailed) as caught:
        run([php_binary(), "-d", "log_errors=1", "-d", "display_errors=0", str(script)])
    first, *rest = str(caught.value).splitlines()
    assert first.startswith("exit 255: PHP Fatal error:  Uncaught Error: Call to undefined"), first
    assert rest[-1].strip().startswith("thrown in "), rest  # the whole tail is kept below


def test_a_program_killed_for_its_timeout_keeps_its_stderr_tail(pids: Path) -> None:
    script = (
        f'echo $$ >> "{pids}"; echo "connecting to smtp.example.com" >&2;'
        ' echo "still waiting for the SMTP greeting" >&2; sleep 30'
    )
    with pytest.raises(JobTimeout) as caught, soft_timeout(0.5):
        sh(script)
    assert str(caught.value) == (
        "connecting to smtp.example.com\nstill waiting for the SMTP greeting"
    )
    assert all(gone(int(pid)) for pid in pids.read_text().split())


def test_what_a_program_says_in_its_sigterm_trap_when_killed_for_its_timeout_is_kept(
    pids: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tree is killed while its pipes are still read: the cleanup a trap reports is
    in the error and the log, as it is when a cancel kills it."""
    script = (
        f'echo $$ >> "{pids}"; trap \'echo "cleaned up the half-written export" >&2; exit 1\''
        " TERM; echo working >&2; sleep 30 & wait"
    )
    with pytest.raises(JobTimeout) as caught, soft_timeout(0.5):
        sh(script)
    assert str(caught.value).splitlines()[-1] == "cleaned up the half-written export"
    lines = [e["line"] for e in events(capsys, "command_output")]
    assert lines == ["working", "cleaned up the half-written export"], lines


def test_progress_reports_are_left_out_of_the_error(pids: Path) -> None:
    """A program that reports progress and fails (or is killed for its timeout): its error
    said `timed out after 15s: forkq-progress: 35 step 14 of 40`, then every report."""
    reports: list[tuple[float, str]] = []
    job = SimpleNamespace(**vars(JOB), progress=lambda *report: reports.append(report))

    def reporting(script: str) -> None:
        CommandHandler(CommandConfig(name="report.pdf", argv=("sh", "-c", script)))({}, job)

    with pytest.raises(CommandFailed) as caught:
        reporting(
            "echo 'forkq-progress: 10 step 1' >&2; echo 'cannot reach the API' >&2;"
            " echo 'forkq-progress: 20 step 2' >&2; exit 1"
        )
    assert str(caught.value) == "exit 1: cannot reach the API"
    script = (
        f'echo $$ >> "{pids}"; echo "waiting for the export" >&2;'
        ' echo "forkq-progress: 35 step 14 of 40" >&2; sleep 30'
    )
    with pytest.raises(JobTimeout) as timed_out, soft_timeout(0.5):
        reporting(script)
    assert str(timed_out.value) == "waiting for the export"
    assert reports[:2] == [(10.0, "step 1"), (20.0, "step 2")]  # still reports


def test_a_program_that_cannot_start_is_a_failed_attempt(tmp_path: Path) -> None:
    program = tmp_path / "job.sh"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    handler = CommandHandler(CommandConfig(name="report.pdf", argv=(str(program),)))
    program.unlink()  # a deploy removed it after the config was loaded
    with pytest.raises(CommandFailed, match=r"^could not start '.*job\.sh': No such file"):
        handler({}, JOB)


def test_a_grandchild_holding_the_pipes_does_not_hold_the_job(pids: Path) -> None:
    """The job ends when the program exits; the leftover is the pool child's to sweep."""
    sh(f'sleep 30 & echo $! > "{pids}"; echo started')
    [leftover] = [int(w) for w in pids.read_text().split()]
    assert not gone(leftover)  # still writing-capable: we did not wait for its EOF


def test_the_soft_timeout_kills_the_whole_tree_even_deaf_to_sigterm(
    pids: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deaf = (
        "trap '' TERM\n"
        f"sh -c 'echo $$ >> \"{pids}\"; exec sleep 300' &\n"
        f"setsid sh -c 'echo $$ >> \"{pids}\"; exec sleep 300' &\n"
        f'echo $$ >> "{pids}"\n'
        "while :; do sleep 0.05; done\n"
    )
    with pytest.raises(JobTimeout), soft_timeout(0.5):
        sh(deaf)
    noted = [int(w) for w in pids.read_text().split()]
    assert len(noted) == 3
    assert all(gone(pid) for pid in noted)
    [killed] = events(capsys, "command_killed")
    assert killed["reason"] == "JobTimeout" and killed["sigkilled"] >= 2


def test_the_program_starts_with_sigint_at_its_default_where_the_caller_ignores_it() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(CommandFailed) as caught:
            sh("grep SigIgn /proc/self/status >&2; exit 1")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # put back afterwards
    finally:
        signal.signal(signal.SIGINT, previous)
    ignored = int(str(caught.value).split()[-1], 16)
    assert not ignored & (1 << (signal.SIGINT - 1))


def test_protocol_lines_past_the_logged_lines_cap_are_still_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Lines past MAX_LOGGED_LINES a stream are counted, not logged, yet still read: every
    `forkq-progress:` line reaches job.progress and the last `forkq-result:` line is the
    result (before: what came by line 1,000, so the last report and the result were lost)."""
    reports: list[tuple[float, str]] = []
    job = SimpleNamespace(**vars(JOB), progress=lambda *report: reports.append(report))
    lines = MAX_LOGGED_LINES + 500
    script = (
        f'i=1; while [ $i -le {lines} ]; do echo "forkq-progress: 50 item $i" >&2;'
        " echo line $i; i=$((i+1)); done; echo 'forkq-result: [1, 2]'"
    )
    handler = CommandHandler(CommandConfig(name="report.pdf", argv=("sh", "-c", script)))
    assert handler({}, job) == [1, 2]
    assert len(reports) == lines and reports[-1] == (50.0, f"item {lines}")
    capped = events(capsys, "command_output_capped")
    assert sorted((e["stream"], e["lines_not_logged"]) for e in capped) == [
        ("stderr", 500),
        ("stdout", 501),
    ]
