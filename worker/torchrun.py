"""torchrun, plus a record of which rank failed first: `python -m worker.torchrun REPORT ARGS...`.

torchrun prints its ranks' failures as text. A rank killed by a signal leaves nothing else, and
rank 0 only sees its broken collective ("Connection closed by peer"). This wrapper runs
torchrun's own `main` and, when ranks failed, writes the first failure to REPORT as JSON
(`FirstFailure`), so the launcher can name the rank that died and how.
"""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

EXIT_RANKS_FAILED = 1


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
    """The earliest failure; within a timestamp's second, a death by a signal other than
    SIGTERM (a kill, a crash) before an exit (a rank reacting to its broken peer)."""

    def order(item: tuple[int, Any]) -> tuple[int, int, int]:
        rank, failure = item
        caused = failure.exitcode < 0 and failure.exitcode != -signal.SIGTERM
        return (int(failure.timestamp), 0 if caused else 1, rank)

    rank, failure = min(failures.items(), key=order)
    return FirstFailure(rank=rank, exitcode=int(failure.exitcode))


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    report, args = Path(argv[0]), argv[1:]
    try:
        torchrun_main(args)
    except ChildFailedError as exc:
        print(exc, file=sys.stderr)  # torchrun's own account, for the session log
        report.write_text(json.dumps(asdict(first_failure(exc.failures))))
        return EXIT_RANKS_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
