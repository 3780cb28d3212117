"""The ledger a pool child shares with its master (daemon/ledger.py): a held job is either
started by the child or taken back by the master, never both, also when both race from
two processes; and successes the master wrote are never written again by the child."""

from __future__ import annotations

import os
import time

from supervisor.daemon.ledger import Holding, Ledger, LockFile
from supervisor.daemon.scoreboard import Scoreboard


def make() -> tuple[Ledger, Scoreboard]:
    ledger = Ledger(LockFile())
    ledger.slot = os.getpid()
    return ledger, Scoreboard()


def test_a_job_taken_back_never_starts_and_a_started_job_is_never_taken() -> None:
    ledger, board = make()
    ledger.hold([1, 2, 3])
    assert ledger.start(1, lambda: board.write(1, 10.0, 0))
    assert not ledger.take(board, 10.0, time.monotonic())  # job 1 is not past the grace yet
    taken = ledger.take(board, 0.0, time.monotonic())
    assert taken.unstarted == [2, 3] and taken.unmarked is None  # 1 was first: claim-marked
    assert taken.running == 1
    assert not ledger.start(2, lambda: board.write(2, 10.0, 0))
    assert not ledger.pending()


def test_the_child_takes_jobs_off_its_held_list_unless_the_master_took_them() -> None:
    """A rate's held jobs that may start no more go back by the child (work/holds.py):
    those the master took back first are the master's to write, not the child's."""
    ledger, board = make()
    ledger.hold([1, 2, 3, 4])
    assert ledger.start(1, lambda: board.write(1, 10.0, 0))
    assert ledger.unhold([3]) == [3]
    assert not ledger.start(3, lambda: board.write(3, 10.0, 0))
    assert ledger.take(board, 0.0, time.monotonic()).unstarted == [2, 4]
    assert ledger.unhold([2, 4]) == []


def test_a_job_started_behind_another_is_unmarked_until_taken() -> None:
    ledger, board = make()
    ledger.hold([1, 2])
    assert ledger.start(1, lambda: board.write(1, 10.0, 0))
    ledger.succeeded(1)
    assert ledger.start(2, lambda: board.write(2, 10.0, 1))
    taken = ledger.take(board, 0.0, time.monotonic())
    assert (taken.unstarted, taken.successes, taken.unmarked) == ([], [1], 2)
    assert ledger.written_elsewhere() == [1]  # the child forgets what the master wrote
    assert ledger.written_elsewhere() == []


def test_the_child_writes_what_the_master_did_not_take() -> None:
    ledger, board = make()
    ledger.hold([5])
    assert ledger.start(5, lambda: board.write(5, 10.0, 0))
    ledger.succeeded(5)
    assert ledger.written_elsewhere() == []  # nothing taken: the child writes 5 itself
    assert not ledger.take(board, 0.0, time.monotonic())  # and the master finds nothing left


def test_take_reads_the_running_job_under_the_lock() -> None:
    """The job the master saw past the grace may have ended: what runs now decides."""
    ledger, board = make()
    ledger.hold([1, 2, 3])
    assert ledger.start(1, lambda: board.write(1, 10.0, 0))
    ledger.succeeded(1)
    assert ledger.start(2, lambda: board.write(2, 10.0, 1))  # 2 just started: not past it
    assert not ledger.take(board, 5.0, time.monotonic())
    taken = ledger.take(board, 0.0, time.monotonic())
    assert (taken.running, taken.unmarked, taken.unstarted) == (2, 2, [3])


def test_a_cancel_during_a_claim_is_looked_at_again_later() -> None:
    ledger, board = make()
    ledger.claiming()  # the claim's transaction may have taken job 5 already
    assert ledger.find(5, board) is Holding.UNKNOWN
    ledger.hold([5])
    assert ledger.find(5, board) is Holding.UNSTARTED


def test_find_says_where_a_cancelled_job_stands() -> None:
    ledger, board = make()
    ledger.hold([1, 2, 3])
    assert ledger.start(1, lambda: board.write(1, 10.0, 0))
    assert ledger.find(1, board) is Holding.RUNNING
    assert ledger.find(3, board) is Holding.UNSTARTED
    assert not ledger.start(3, lambda: board.write(3, 10.0, 0))  # it never starts here
    board.write(None, 0.0, 1)
    ledger.succeeded(1)
    assert ledger.find(1, board) is Holding.SUCCEEDED
    assert ledger.written_elsewhere() == [1]
    assert ledger.find(7, board) is Holding.NOT_HELD


def test_start_and_take_racing_from_two_processes_never_overlap() -> None:
    """A forked child starts jobs as fast as it can while this process takes them back:
    every job ends in exactly one of the two sets."""
    lock = LockFile()
    ledger, board = Ledger(lock), Scoreboard()
    rounds, per_round = 300, 8
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: hold a batch, then start what it still can
        code = 1
        try:
            os.close(read_fd)
            ledger.slot = os.getpid()
            started: list[int] = []
            for r in range(rounds):
                ids = [r * per_round + i + 1 for i in range(per_round)]
                ledger.hold(ids)
                os.write(write_fd, b"h")
                for job_id in ids:
                    if ledger.start(job_id, lambda j=job_id: board.write(j, 10.0, 0)):
                        started.append(job_id)
            os.write(write_fd, b"\n" + ",".join(map(str, started)).encode() + b"\n")
            code = 0
        finally:
            os._exit(code)
    os.close(write_fd)
    ledger.slot = pid
    taken: list[int] = []
    data = b""
    while b"\n" not in data:
        data += os.read(read_fd, 65536)
        taken += ledger.take(board, 0.0, time.monotonic()).unstarted
    while not data.endswith(b"\n") or data.count(b"\n") < 2:
        data += os.read(read_fd, 65536)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    started = [int(x) for x in data.split(b"\n")[1].split(b",") if x]
    everything = set(range(1, rounds * per_round + 1))
    # Taken jobs the child had not reached yet are taken; the rest it started.
    assert not set(started) & set(taken)
    assert set(started) | set(taken) == everything
    assert taken, "the race was run: some jobs were taken back"


def test_a_success_listed_with_the_next_start_is_the_masters_to_take() -> None:
    """One lock a job: the previous job's success goes into the ledger with the next job's
    start, also when that job was taken back meanwhile (it never starts here)."""
    ledger, board = make()
    ledger.hold([1, 2, 3])
    assert ledger.start(1, lambda: board.write(1, 10.0, 0))
    assert ledger.start(2, lambda: board.write(2, 10.0, 1), success=1)
    taken = ledger.take(board, 0.0, time.monotonic())
    assert (taken.unstarted, taken.successes, taken.running) == ([3], [1], 2)
    assert not ledger.start(3, lambda: board.write(3, 10.0, 2), success=2)
    board.write(None, 0.0, 2)
    assert ledger.find(2, board) is Holding.SUCCEEDED  # listed although 3 never started


def test_a_child_lists_a_success_at_once_unless_another_held_job_starts_next() -> None:
    from supervisor.config import PoolConfig
    from supervisor.daemon.child import ChildSpec, PipeEvents
    from supervisor.store.jobs import claimed_job

    ledger, board = make()
    status_r, status_w = os.pipe()
    spec = ChildSpec(PoolConfig(name="q"), 1, "h:1:t", os.getpid(), status_w, status_r, board,
                     "m", ledger)  # fmt: skip
    events = PipeEvents(spec)

    def row(job_id: int) -> object:
        return claimed_job(
            {"id": job_id, "handler": "h", "payload": "{}", "priority": 0, "attempts": 0,
             "max_attempts": None, "unique_key": None, "run_at_s": 0.0, "enqueued_at_s": 0.0},
            "q", "h:1:t",
        )  # fmt: skip

    ledger.hold([1, 2])
    assert events.start(row(1), 10.0)  # type: ignore[arg-type]
    board.write(None, 0.0, 1)  # job 1 ended
    events.succeeded(1, more=True)  # 2 starts next: listed with it, not yet
    assert ledger.find(1, board) is Holding.NOT_HELD
    assert events.start(row(2), 10.0)  # type: ignore[arg-type]
    board.write(None, 0.0, 2)
    events.succeeded(2, more=False)  # the batch's last: listed at once
    assert ledger.find(1, board) is Holding.SUCCEEDED
    assert ledger.find(2, board) is Holding.SUCCEEDED
    assert events.written_elsewhere() == [1, 2]
    ledger.hold([3, 4])
    assert events.start(row(3), 10.0)  # type: ignore[arg-type]
    board.write(None, 0.0, 3)
    events.succeeded(3, more=True)
    assert events.written_elsewhere() == []  # the child writes 3 itself now ...
    assert events.start(row(4), 10.0)  # type: ignore[arg-type]
    board.write(None, 0.0, 4)
    assert ledger.find(3, board) is Holding.NOT_HELD  # ... so the master never gets it
    os.close(status_r)
    os.close(status_w)


def test_what_is_left_unstarted_keeps_its_order_as_jobs_start_or_are_cancelled() -> None:
    """A start takes the first held job in place; a cancel from the middle, or a start out
    of order, takes it from where it stands: the master gets back exactly the rest, in
    the order they would have run."""
    ledger, board = make()
    ledger.hold(list(range(1, 101)))
    for job in range(1, 41):
        assert ledger.start(job, lambda: None)
    assert ledger.find(50, board) is Holding.UNSTARTED  # a cancel from the middle
    assert ledger.start(41, lambda: None)
    assert ledger.start(60, lambda: None)  # out of order: looked for, not assumed first
    assert not ledger.start(50, lambda: None)
    board.write(60, 10.0, 0)
    taken = ledger.take(board, 0.0, time.monotonic())
    assert taken.unstarted == [n for n in range(42, 101) if n not in (50, 60)]
