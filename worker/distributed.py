"""The ranks of one segment: who they are, their one stop decision and the commit barrier.

A segment with `nproc > 1` runs one worker process per rank under torchrun, which sets RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. The runtime sets up the process group
before the trainer, so accelerate and DeepSpeed find it ready and reuse it.

All ranks must stop at the same step, or the next collective pairs up the wrong calls and
hangs. So every step each rank proposes a stop code (its own deadline rule, its stop flag) and
they all take the MAX with one all-reduce of a single integer. The codes are ordered by
precedence, which makes MAX the right merge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol

# Stop codes: 0 means go on; a larger code wins the all-reduce.
GO_ON = 0
STOP_DEADLINE = 1
STOP_FLAG = 2
STOP_COMPLETED = 3
# Above completed: a diverged state is never committed, even at the last step.
STOP_DIVERGED = 4
# The owner cancelled the job (worker.control): end without committing, above everything.
STOP_CANCELLED = 5

# How long a collective waits for a silent peer. A dead peer breaks its sockets at once and
# torchrun tears the group down within its monitor interval; this only bounds a hung one.
DEFAULT_COLLECTIVE_TIMEOUT_SECONDS = 60.0


@dataclass(frozen=True)
class RankInfo:
    """This process's place in the segment, from the launcher's environment."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> RankInfo:
        env = os.environ if environ is None else environ
        if "WORLD_SIZE" not in env:
            return cls()
        return cls(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", env["RANK"])),
        )


def launched_by_torchrun(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return "TORCHELASTIC_RUN_ID" in env or "WORLD_SIZE" in env


class RankGroup(Protocol):
    """The two collectives the runtime needs; a single process answers them alone."""

    info: RankInfo

    def agree_stop(self, code: int) -> int:
        """The largest stop code any rank proposed this step."""
        ...

    def barrier(self) -> None: ...


class SingleProcess:
    """The group of one: agreement is the process's own decision."""

    def __init__(self) -> None:
        self.info = RankInfo()

    def agree_stop(self, code: int) -> int:
        return code

    def barrier(self) -> None:
        return None


class TorchRankGroup:
    """torch.distributed over gloo for the agreement (a CPU int costs microseconds).

    On CUDA the default group gets NCCL for tensors on the GPU and gloo for the CPU ones, so the
    stop agreement never waits for a device synchronisation.
    """

    def __init__(self, info: RankInfo, timeout_seconds: float) -> None:
        import torch
        import torch.distributed as dist

        self.info = info
        self._dist = dist
        if not dist.is_initialized():
            backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
            if torch.cuda.is_available():
                torch.cuda.set_device(info.local_rank)
            dist.init_process_group(
                backend=backend,
                rank=info.rank,
                world_size=info.world_size,
                timeout=timedelta(seconds=timeout_seconds),
            )
        self._flag = torch.zeros(1, dtype=torch.int64)

    def agree_stop(self, code: int) -> int:
        self._flag.fill_(code)
        self._dist.all_reduce(self._flag, op=self._dist.ReduceOp.MAX)
        return int(self._flag.item())

    def barrier(self) -> None:
        # A gloo barrier is an all-reduce in disguise; an explicit one keeps the CPU group
        # even when the default device is a GPU.
        self.agree_stop(GO_ON)

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def join_rank_group(info: RankInfo, timeout_seconds: float) -> RankGroup:
    if info.world_size == 1:
        return SingleProcess()
    return TorchRankGroup(info, timeout_seconds)
