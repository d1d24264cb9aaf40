"""AccelerateCausalLM: data-parallel training of a causal LM through Hugging Face accelerate.

Baton owns the loop (so the runtime's stop agreement runs every step); accelerate owns the
devices, DDP, mixed precision and gradient accumulation. Precision follows the device: fp16
with a grad scaler on a T4, bf16 where the GPU has it, fp32 on CPU. The checkpoint is
accelerate's own `save_state` (model, optimizer, scaler, per-rank RNGs, the scheduler and the
sampler as registered objects), written inside Baton's atomic commit.

Config keys (all optional): the model sizes of `trainers.causal_lm.MODEL_DEFAULTS`, and
batch_size (per rank and micro-step), grad_accum, gradient_checkpointing, lr, warmup_steps,
weight_decay, grad_clip, step_seconds (test aid: pad every step to this duration).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from trainers.causal_lm import (
    CharCorpus,
    build_causal_lm,
    device_precision,
    model_settings,
    pad_step,
    warmup_linear,
)
from worker.sampler import ResumableSampler
from worker.trainer import Trainer

ACCELERATE_DIR = "accelerate"
DEFAULTS: dict[str, Any] = {
    "batch_size": 4,
    "grad_accum": 2,
    "gradient_checkpointing": False,
    "lr": 3e-3,
    "warmup_steps": 5,
    "weight_decay": 0.01,
    "grad_clip": 1.0,
}


class AccelerateCausalLM(Trainer):
    def setup(self) -> None:
        from accelerate import Accelerator

        cfg = {**DEFAULTS, **self.ctx.config}
        self.cfg = cfg
        device_type, precision = device_precision()
        self.accelerator = Accelerator(
            cpu=device_type == "cpu",
            mixed_precision=precision,
            gradient_accumulation_steps=int(cfg["grad_accum"]),
        )
        settings = model_settings(cfg)
        self.corpus = CharCorpus.load(int(settings["block_size"]), int(settings["stride"]))
        self.sampler = ResumableSampler(
            self.corpus.num_windows,
            seed=self.ctx.seed,
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
        )
        model = self.build_model(cfg)
        if cfg["gradient_checkpointing"]:
            model.gradient_checkpointing_enable({"use_reentrant": False})
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(
            trainable, lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"])
        )
        # Not prepared: accelerate would step a prepared scheduler once per rank.
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, warmup_linear(int(cfg["warmup_steps"]), self.ctx.total_steps)
        )
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.accelerator.register_for_checkpointing(self.scheduler, self.sampler)

    def build_model(self, cfg: Mapping[str, Any]) -> Any:
        """The model to train; subclasses wrap it (LoRA adapters)."""
        return build_causal_lm(cfg, self.corpus.vocab_size)

    def _micro_batch(self) -> Tensor:
        ids = self.corpus.windows(self.sampler.take(int(self.cfg["batch_size"])))
        return ids.to(self.accelerator.device)

    def train_step(self, step: int) -> Mapping[str, float]:
        started = time.monotonic()
        self.model.train()
        losses = []
        for _ in range(int(self.cfg["grad_accum"])):
            with self.accelerator.accumulate(self.model):
                ids = self._micro_batch()
                loss = self.model(input_ids=ids, labels=ids).loss
                self.accelerator.backward(loss)
                if self.accelerator.sync_gradients:
                    self.accelerator.clip_grad_norm_(
                        [p for p in self.model.parameters() if p.requires_grad],
                        float(self.cfg["grad_clip"]),
                    )
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        lr = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        mean_loss = self.accelerator.reduce(torch.stack(losses).mean(), reduction="mean")
        pad_step(started, self.cfg.get("step_seconds"))
        return {"loss": float(mean_loss.item()), "lr": lr}

    def state_dict(self) -> dict[str, Any]:
        # What the save writes, for the runtime's first save-time estimate; the save itself is
        # accelerate's save_state, in write_state.
        return {"model": self.model_tensors(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None  # read_state restored everything through accelerate's load_state

    def model_tensors(self) -> Mapping[str, Tensor]:
        state: Mapping[str, Tensor] = self.accelerator.unwrap_model(self.model).state_dict()
        return state

    def write_state(self, directory: Path, state: dict[str, Any]) -> None:
        # Every rank calls this: rank 0 writes the model, optimizer and registered objects,
        # each rank its own random_states_<rank>.pkl.
        self.accelerator.save_state(str(directory / ACCELERATE_DIR))

    def read_state(self, directory: Path) -> dict[str, Any]:
        self.accelerator.load_state(str(directory / ACCELERATE_DIR))
        return {}
