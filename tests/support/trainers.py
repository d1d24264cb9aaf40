"""A fast, deterministic test trainer with opt-in faults, shared by worker and end-to-end tests.

`LinearTrainer` fits a small linear model with dropout on synthetic data drawn from the seed,
using SGD with momentum, a step-decay learning rate and a ResumableSampler, so every piece of
resumable state is exercised in about a millisecond per step. Its optimizer is written out
(`MomentumSGD`): torch.optim's first call imports torch._dynamo, about 1.1 s of CPU in every
process that trains, half of what one of these sessions costs, and the suite starts hundreds.
The trainers in trainers/ use torch.optim, as a user's do; their tests cover it.

Config keys (all optional):
    step_sleep: float               seconds to sleep in each step, to make sessions time out
    fail_at_step: int               raise RuntimeError when this step begins
    fail_with_unstorable_text: bool the RuntimeError's text holds a NUL and a lone surrogate
                                    (what a CUDA error can hold; JSON configs cannot)
    kill_during_save_segment: int   on this segment index, SIGKILL itself halfway through
                                    writing the checkpoint state
    fault_marker: str               absolute path; if set, a fault fires only while this file
                                    does not exist, and creates it first (so a retry succeeds)
    stop_every_steps: int           SIGTERM itself after this many steps of a segment, so the
                                    runtime commits and the job chains a new segment: sessions
                                    of a fixed number of steps, whatever the machine's speed
    hang_at_step: int               block forever when this step begins (a hung collective or
                                    dataloader); with hang_rank, only on that rank
    load_gate: str                  absolute path: setup waits until it exists (tests.support.gates)
    step_gates: {str(step): str}    absolute paths: that step waits until its file exists
    random_state_bytes: int         ballast of this many random bytes drawn from the seed and
                                    the step in the saved state: a checkpoint that does not
                                    compress, as large as a real model's
    random_state_bytes_per_step: int  the ballast grows by this many bytes per step taken: a
                                    checkpoint that grows from segment to segment
    nan_from_step: int              the loss is NaN from this step on, counted from 1 as the
                                    step log counts (the weights go NaN with it); with
                                    fault_marker, armed for the whole of one segment only
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tests.support.gates import wait_at_gate, wait_at_step_gate
from worker.sampler import ResumableSampler
from worker.trainer import TRAINER_STATE_FILE, Trainer

FEATURES = 8
SAMPLES = 96
BATCH = 8


class MomentumSGD:
    """What torch.optim.SGD(momentum=0.9) under StepLR(step_size=7, gamma=0.9) computes, with its
    state (the momentum buffers and the steps taken) saved and restored as tensors and ints."""

    MOMENTUM = 0.9
    STEP_SIZE = 7
    GAMMA = 0.9

    def __init__(self, parameters: list[Tensor], lr: float) -> None:
        self.parameters = parameters
        self.base_lr = lr
        self.buffers = [torch.zeros_like(p) for p in parameters]
        self.steps = 0

    @property
    def lr(self) -> float:
        return self.base_lr * self.GAMMA ** (self.steps // self.STEP_SIZE)

    def step(self) -> None:
        lr = self.lr
        with torch.no_grad():
            for parameter, buffer in zip(self.parameters, self.buffers, strict=True):
                assert parameter.grad is not None
                buffer.mul_(self.MOMENTUM).add_(parameter.grad)
                parameter.add_(buffer, alpha=-lr)
                parameter.grad = None
        self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        return {"momentum": [buffer.clone() for buffer in self.buffers], "steps": self.steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.buffers = [buffer.clone() for buffer in state["momentum"]]
        self.steps = int(state["steps"])


class LinearTrainer(Trainer):
    def setup(self) -> None:
        wait_at_gate(self.ctx)
        config = self.ctx.config
        generator = torch.Generator().manual_seed(self.ctx.seed)
        self.inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
        true_weights = torch.randn(FEATURES, 1, generator=generator)
        self.targets = self.inputs @ true_weights
        self.model = nn.Sequential(nn.Dropout(0.1), nn.Linear(FEATURES, 1))
        self.optimizer = MomentumSGD(list(self.model.parameters()), float(config.get("lr", 0.05)))
        self.sampler = ResumableSampler(SAMPLES, seed=self.ctx.seed)
        # Whether the NaN fault fires, decided at its first step: the streak stays unbroken.
        self.nan_armed: bool | None = None

    def train_step(self, step: int) -> Mapping[str, float]:
        config = self.ctx.config
        if config.get("fail_at_step") == step and self._fault_armed():
            if config.get("fail_with_unstorable_text"):
                raise RuntimeError(f"CUDA error\x00 at step {step} \ud800 injected")
            raise RuntimeError(f"injected failure at step {step}")
        hangs_here = config.get("hang_rank", self.ctx.rank) == self.ctx.rank
        if config.get("hang_at_step") == step and hangs_here and self._fault_armed():
            threading.Event().wait()  # forever: only the watchdog ends this process
        wait_at_step_gate(self.ctx, step)
        if config.get("step_sleep"):
            time.sleep(float(config["step_sleep"]))
        every = config.get("stop_every_steps")
        if every and step + 1 - self.ctx.start_step == int(every):
            os.kill(os.getpid(), signal.SIGTERM)  # the stop flag: commit after this step
        index = torch.tensor(self.sampler.take(BATCH))
        loss = nn.functional.mse_loss(self.model(self.inputs[index]), self.targets[index])
        nan_from = config.get("nan_from_step")
        if nan_from is not None and step + 1 >= int(nan_from):
            if self.nan_armed is None:
                self.nan_armed = self._fault_armed()
            if self.nan_armed:
                loss = loss * float("nan")
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item(), "lr": self.optimizer.lr}

    def state_dict(self) -> dict[str, Any]:
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "sampler": self.sampler.state_dict(),
        }
        if self.ctx.config.get("state_bytes"):
            # Ballast: a state as large as a real model's, to exercise size-based estimates.
            state["ballast"] = torch.zeros(int(self.ctx.config["state_bytes"]), dtype=torch.uint8)
        config = self.ctx.config
        if config.get("random_state_bytes") or config.get("random_state_bytes_per_step"):
            growth = int(config.get("random_state_bytes_per_step", 0)) * self.optimizer.steps
            size = int(config.get("random_state_bytes", 0)) + growth
            drawn = torch.Generator().manual_seed(self.ctx.seed * 1_000_003 + self.sampler.position)
            state["noise"] = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=drawn)
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.sampler.load_state_dict(state["sampler"])

    def model_tensors(self) -> Mapping[str, Tensor]:
        return self.model.state_dict()

    def write_state(self, directory: Path, state: dict[str, Any]) -> None:
        kill_segment = self.ctx.config.get("kill_during_save_segment")
        if kill_segment == self.ctx.segment_index and self._fault_armed():
            # Leave a torn file behind, as a session killed mid-save would.
            super().write_state(directory, state)
            path = directory / TRAINER_STATE_FILE
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        super().write_state(directory, state)

    def _fault_armed(self) -> bool:
        marker = self.ctx.config.get("fault_marker")
        if marker is None:
            return True
        path = Path(marker)
        if path.exists():
            return False
        path.touch()
        return True


def make_linear_trainer(
    config: Mapping[str, Any] | None = None, *, segment_index: int = 0, seed: int = 7
) -> LinearTrainer:
    """A set-up LinearTrainer outside the runtime, for checkpoint tests."""
    from worker.rng import seed_everything
    from worker.trainer import TrainContext

    seed_everything(seed)
    ctx = TrainContext(
        config=config or {},
        seed=seed,
        job_id="job-1",
        segment_index=segment_index,
        total_steps=100,
        start_step=0,
    )
    trainer = LinearTrainer(ctx)
    trainer.setup()
    return trainer
