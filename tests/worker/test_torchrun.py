"""Which rank a failed multi-rank segment names: the one that failed first, and how; torchrun's
agent in the launcher's own process."""

import os
import signal
from pathlib import Path
from types import FrameType, SimpleNamespace

import pytest

from worker.torchrun import EXIT_RANKS_FAILED, FirstFailure, first_failure, run_torchrun


def failure(timestamp: int, exitcode: int) -> SimpleNamespace:
    return SimpleNamespace(timestamp=timestamp, exitcode=exitcode)


def test_a_killed_rank_is_the_cause_over_the_rank_that_saw_its_peer_go() -> None:
    # Within one second: rank 0 exited 1 on its broken collective, rank 1 was SIGKILLed.
    found = first_failure({0: failure(100, 1), 1: failure(100, -9)})
    assert found == FirstFailure(rank=1, exitcode=-9)
    assert found.describe() == "rank 1 was killed by SIGKILL"


def test_an_earlier_failure_wins_and_torchruns_own_sigterm_is_no_cause() -> None:
    assert first_failure({0: failure(101, -9), 1: failure(100, 1)}).rank == 1
    # Rank 1 exited 2; the agent then ended rank 0, still running, with SIGTERM, in that second.
    found = first_failure({0: failure(100, -15), 1: failure(100, 2)})
    assert found == FirstFailure(rank=1, exitcode=2)
    assert found.describe() == "rank 1 exited with code 2"
    # A SIGTERM a second before any other failure is still the first.
    assert first_failure({0: failure(99, -15), 1: failure(100, 2)}).rank == 0


# torchrun's agent starts two ranks of a module that exits 2 (json.tool, on a file that is not
# there): quick processes, no torch in them.
@pytest.mark.slow
def test_the_agent_runs_in_the_launcher_reports_the_failure_and_gives_back_its_handlers(
    tmp_path: Path,
) -> None:
    def launchers_own(signum: int, frame: FrameType | None) -> None:
        raise AssertionError("not called")

    environ = dict(os.environ)  # the agent sets OMP_NUM_THREADS for its ranks, in this process
    previous = signal.signal(signal.SIGTERM, launchers_own)
    report = tmp_path / "first-failure.json"
    try:
        agent = ["--standalone", "--nproc-per-node=2", "--max-restarts=0"]
        code = run_torchrun(report, [*agent, "-m", "json.tool", str(tmp_path / "missing.json")])
        assert signal.getsignal(signal.SIGTERM) is launchers_own
    finally:
        signal.signal(signal.SIGTERM, previous)
        os.environ.clear()
        os.environ.update(environ)
    assert code == EXIT_RANKS_FAILED
    first = FirstFailure.read(report)
    assert first is not None
    assert first.rank in (0, 1)
    assert first.exitcode == 2
