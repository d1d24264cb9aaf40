"""The trainer API: what a training program implements so the runtime can chain it exactly.

The runtime owns seeding, every RNG, the step loop, the deadline, stopping, checkpoint commit
and result.json. A trainer owns its model, optimizer, scheduler, scaler and data order, and
hands all of that over through `state_dict` / `load_state_dict`.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from torch import Tensor

TRAINER_STATE_FILE = "trainer.pt"


@dataclass(frozen=True)
class TrainContext:
    """What a trainer knows about the segment it runs in."""

    config: Mapping[str, Any]
    seed: int
    job_id: str
    segment_index: int
    total_steps: int
    start_step: int
    rank: int = 0
    world_size: int = 1
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("worker.trainer"))


class Trainer(abc.ABC):
    """Base class for training programs run by `python -m worker`.

    Determinism contract: `setup` builds everything from `ctx.config` and the global RNGs the
    runtime has seeded; `train_step` draws randomness only from the global RNGs (which the
    runtime checkpoints) or from state returned by `state_dict`.
    """

    def __init__(self, ctx: TrainContext) -> None:
        self.ctx = ctx

    @abc.abstractmethod
    def setup(self) -> None:
        """Build model, optimizer, scheduler, scaler and data from ctx.config and ctx.seed."""

    @abc.abstractmethod
    def train_step(self, step: int) -> Mapping[str, float]:
        """One optimizer step; `step` counts from 0 over the whole job. Returns metrics."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Model, optimizer, scheduler, scaler and sampler state; the runtime adds the RNGs."""

    @abc.abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned; called after `setup`."""

    @abc.abstractmethod
    def model_tensors(self) -> Mapping[str, Tensor]:
        """The tensors `model_digest` covers, usually `model.state_dict()`."""

    def write_state(self, directory: Path, state: dict[str, Any]) -> None:
        """Write `state` into the uncommitted checkpoint directory; override with `read_state`.

        Runs before the manifest exists, so a crash here leaves no valid checkpoint behind.
        Every rank calls it on the same directory. By default only rank 0 writes, which suits
        data parallelism (every rank holds the same state); a trainer whose state differs by
        rank (sharded optimizers) writes one file per rank.
        """
        import torch

        if self.ctx.rank == 0:
            torch.save(state, directory / TRAINER_STATE_FILE)

    def read_state(self, directory: Path) -> dict[str, Any]:
        """Read what `write_state` wrote from a verified checkpoint directory."""
        import torch

        state: dict[str, Any] = torch.load(
            directory / TRAINER_STATE_FILE, map_location="cpu", weights_only=True
        )
        return state


class LoopDriver(Protocol):
    """What the runtime offers a loop it does not own: one call at the end of every step."""

    def step_ended(self, step: int) -> bool:
        """Record a finished step (`step` steps done in the job); True: stop now and commit."""
        ...

    def record_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """Add what the loop logged for `step` to the segment's metrics series."""
        ...


class LoopTrainer(Trainer):
    """A trainer whose library owns the loop (the Hugging Face `Trainer`, TRL).

    The runtime still seeds, restores, agrees on the stop and commits. The library's loop
    calls `driver.step_ended` after every optimizer step (see worker.hf for a callback that
    does) and returns as soon as it answers True; the runtime then commits.
    """

    @abc.abstractmethod
    def run_loop(self, driver: LoopDriver) -> None:
        """Train from the restored state until the driver says stop or the job is done."""

    def train_step(self, step: int) -> Mapping[str, float]:
        raise TypeError(f"{type(self).__name__} owns its loop: the runtime calls run_loop")
