"""torchrun's agent, in the launcher's own interpreter, plus a record of which rank failed first.

torchrun prints its ranks' failures as text. A rank killed by a signal leaves nothing else, and
rank 0 only sees its broken collective ("Connection closed by peer"). `run_torchrun` runs
torchrun's own `main` and, when ranks failed, writes the first failure to REPORT as JSON
(`FirstFailure`), so the launcher can name the rank that died and how.

It runs in the launcher (worker/launch.py), which imported torch already: a separate
`python -m torch.distributed.run` would import it again, 2-3 CPU-s and as much of the session's
time every multi-rank segment. The agent takes SIGTERM, SIGINT, SIGHUP and SIGQUIT for its own
while it runs (it stops the ranks and raises); the launcher's handlers are put back after.
"""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

EXIT_RANKS_FAILED = 1
# The signals torchrun's agent handles (its TORCHELASTIC_SIGNALS_TO_HANDLE default).
_AGENT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


@dataclass(frozen=True)
class FirstFailure:
    rank: int
    exitcode: int

    def describe(self) -> str:
        if self.exitcode < 0:
            try:
                name = signal.Signals(-self.exitcode).name
            except ValueError:
                name = f"signal {-self.exitcode}"
            return f"rank {self.rank} was killed by {name}"
        return f"rank {self.rank} exited with code {self.exitcode}"

    @classmethod
    def read(cls, path: Path) -> FirstFailure | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def first_failure(failures: dict[int, Any]) -> FirstFailure:
    """The earliest failure. Within a timestamp's second: a death by a signal other than SIGTERM
    (a kill, a crash) first, then an exit (a rank that failed, or one reacting to its broken
    peer), and a death by SIGTERM last: the agent sends it to the ranks still running once one
    has failed, so a rank ended by it was not the cause."""

    def order(item: tuple[int, Any]) -> tuple[int, int, int]:
        rank, failure = item
        if failure.exitcode == -signal.SIGTERM:
            tier = 2
        elif failure.exitcode < 0:
            tier = 0
        else:
            tier = 1
        return (int(failure.timestamp), tier, rank)

    rank, failure = min(failures.items(), key=order)
    return FirstFailure(rank=rank, exitcode=int(failure.exitcode))


def run_torchrun(report: Path, args: list[str]) -> int:
    """torchrun with `args`, to its end: 0 when every rank succeeded, else EXIT_RANKS_FAILED
    (the first failure in `report`) or 128 + the signal that stopped the agent."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    handlers = {signum: signal.getsignal(signum) for signum in _AGENT_SIGNALS}
    try:
        torchrun_main(args)
    except ChildFailedError as exc:
        print(exc, file=sys.stderr)  # torchrun's own account, for the session log
        report.write_text(json.dumps(asdict(first_failure(exc.failures))))
        return EXIT_RANKS_FAILED
    except SignalException as exc:  # the agent stopped the ranks first
        print(exc, file=sys.stderr)
        return 128 + int(exc.sigval)
    finally:
        for signum, handler in handlers.items():
            if handler is not None:  # None: one set outside Python, which Python cannot restore
                signal.signal(signum, handler)
    return 0
