"""Which rank a failed multi-rank segment names: the one that failed first, and how."""

from types import SimpleNamespace

from worker.torchrun import FirstFailure, first_failure


def failure(timestamp: int, exitcode: int) -> SimpleNamespace:
    return SimpleNamespace(timestamp=timestamp, exitcode=exitcode)


def test_a_killed_rank_is_the_cause_over_the_rank_that_saw_its_peer_go():
    # Within one second: rank 0 exited 1 on its broken collective, rank 1 was SIGKILLed.
    found = first_failure({0: failure(100, 1), 1: failure(100, -9)})
    assert found == FirstFailure(rank=1, exitcode=-9)
    assert found.describe() == "rank 1 was killed by SIGKILL"


def test_an_earlier_failure_wins_and_torchruns_own_sigterm_is_no_cause():
    assert first_failure({0: failure(101, -9), 1: failure(100, 1)}).rank == 1
    found = first_failure({0: failure(100, -15), 1: failure(100, 2)})
    assert found == FirstFailure(rank=0, exitcode=-15)
    assert FirstFailure(rank=1, exitcode=2).describe() == "rank 1 exited with code 2"
