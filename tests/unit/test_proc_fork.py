"""proc.fork_process: the one fork of the master's processes (pool children, the check
tick, the metrics server) and its outermost frame, with real forks."""

from __future__ import annotations

import gc
import json
import os
import signal
from collections.abc import Callable, Iterator

import pytest

from supervisor.proc import MASTER_SIGNALS, fork_process, freeze_heap


@pytest.fixture
def parent_mask() -> Iterator[set[signal.Signals]]:
    """The test's own mask: SIGUSR1 blocked (not one of the master's), restored after."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    yield signal.pthread_sigmask(signal.SIG_BLOCK, set())
    signal.pthread_sigmask(signal.SIG_SETMASK, old)


def run(body: Callable[[], int], close_fds: list[int] | None = None) -> tuple[int, list[str]]:
    """Fork `body`; its exit code and what its crash report said."""
    crash_r, crash_w = os.pipe()

    def crashed(error: str) -> None:
        os.write(crash_w, error.encode())

    pid = fork_process(body, close_fds or [], crashed)
    os.close(crash_w)
    said = b""
    while chunk := os.read(crash_r, 65536):
        said += chunk
    os.close(crash_r)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    return os.WEXITSTATUS(status), [said.decode()] if said else []


def test_the_body_s_return_value_is_the_exit_code() -> None:
    assert run(lambda: 7) == (7, [])


def test_a_body_that_raises_is_reported_and_exits_1_without_unwinding() -> None:
    def body() -> int:
        raise RuntimeError("the body broke")

    code, said = run(body)
    assert code == 1
    assert len(said) == 1 and "RuntimeError: the body broke" in said[0]


def test_a_system_exit_s_code_is_the_exit_code() -> None:
    def body() -> int:
        raise SystemExit(3)

    assert run(body) == (3, [])


def test_a_crash_report_that_fails_still_exits() -> None:
    def body() -> int:
        raise RuntimeError("first")

    def crashed(error: str) -> None:
        raise OSError("the log is gone")

    pid = fork_process(body, [], crashed)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1


def test_the_mask_is_the_parent_s_on_both_sides_and_handlers_are_reset(
    parent_mask: set[signal.Signals],
) -> None:
    previous = signal.signal(signal.SIGHUP, lambda *_: None)  # as the master's handlers
    try:
        seen_r, seen_w = os.pipe()

        def body() -> int:
            mask = sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set()))
            hup_default = signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
            os.write(seen_w, json.dumps([mask, hup_default]).encode())
            return 0

        code, _ = run(body)
        os.close(seen_w)
        child_mask, hup_default = json.loads(os.read(seen_r, 65536))
        os.close(seen_r)
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert code == 0
    assert parent_mask == {signal.SIGUSR1}
    assert child_mask == [int(signal.SIGUSR1)]  # none of the master's left blocked
    assert hup_default
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == parent_mask
    assert not set(MASTER_SIGNALS) & signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_the_parent_s_mask_is_restored_when_the_fork_fails(
    parent_mask: set[signal.Signals], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fork() -> int:
        raise BlockingIOError("EAGAIN")

    monkeypatch.setattr(os, "fork", no_fork)
    with pytest.raises(BlockingIOError):
        fork_process(lambda: 0, [], lambda error: None)
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == parent_mask


def test_the_given_descriptors_are_closed_before_the_body_runs() -> None:
    keep_r, keep_w = os.pipe()
    try:

        def body() -> int:
            try:
                os.fstat(keep_w)
            except OSError:
                return 0
            return 5

        assert run(body, [keep_w]) == (0, [])
    finally:
        os.close(keep_r)
        os.close(keep_w)


def test_the_child_s_collector_leaves_what_it_inherited_and_the_parent_s_does_not() -> None:
    """Inherited objects are frozen in the child (a collection there would write to every
    one of them: copy-on-write of the master's heap in each new child); the parent's own
    collector is left alone, and a child that forks in turn (the supervisor's masters do)
    keeps its own inherited objects frozen."""
    inherited: list[list[int]] = [[] for _ in range(1000)]  # lists: tracked by the collector
    assert gc.get_freeze_count() == 0

    def body() -> int:
        frozen = gc.get_freeze_count()
        if frozen < len(inherited):
            return 5
        grandchild = fork_process(lambda: 0 if gc.get_freeze_count() >= frozen else 6, [], print)
        _, status = os.waitpid(grandchild, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            return 6
        return 0 if gc.get_freeze_count() >= frozen else 7

    code, said = run(body)
    assert (code, said) == (0, [])
    assert gc.get_freeze_count() == 0


def test_a_frozen_heap_stays_frozen_and_what_comes_after_is_collected() -> None:
    """The master's boot (freeze_heap): what exists then is never walked again, later
    garbage cycles still are. In a forked process, so the test's own heap stays as is."""

    def body() -> int:
        before = [[] for _ in range(1000)]  # tracked by the collector
        freeze_heap()
        frozen = gc.get_freeze_count()
        if frozen < len(before):
            return 5
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        found = gc.collect()
        return 0 if found >= 1 and gc.get_freeze_count() == frozen else 6

    assert run(body) == (0, [])
    assert gc.get_freeze_count() == 0
