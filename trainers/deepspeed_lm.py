"""DeepSpeedCausalLM: ZeRO-2/ZeRO-3 data parallelism for a causal LM, chained by Baton.

`deepspeed_config` generates the DeepSpeed config from the job's config: ZeRO stage 2 or 3,
optional CPU offload of the optimizer state (and, for stage 3, of the parameters), fp16 with
dynamic loss scaling on a T4 (no bf16), bf16 where the GPU has it, fp32 on CPU with
`torch_adam` (DeepSpeed's fused CPU Adam needs a compiler), and ZeRO's buckets sized to the
model (`bucket_sizes`). `validate_deepspeed_config` runs it through DeepSpeed's own config
classes. Checkpoints are the engine's `save_checkpoint` (every rank writes its optimizer shard)
inside Baton's atomic commit; the sampler rides along as client state.

Config keys: the model sizes of `trainers.causal_lm.MODEL_DEFAULTS`, and zero_stage (2 or 3),
offload ("none", "optimizer", "optimizer+params"), batch_size (per rank and micro-step),
grad_accum, lr, warmup_steps, weight_decay, grad_clip, step_seconds (test aid).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch._dynamo
from torch import Tensor

from trainers.causal_lm import (
    CharCorpus,
    build_causal_lm,
    device_precision,
    model_settings,
    pad_step,
)
from worker.sampler import ResumableSampler
from worker.trainer import Trainer

DEEPSPEED_DIR = "deepspeed"
CHECKPOINT_TAG = "baton"
OFFLOADS = ("none", "optimizer", "optimizer+params")
DEFAULTS: dict[str, Any] = {
    "zero_stage": 2,
    "offload": "none",
    "batch_size": 4,
    "grad_accum": 2,
    "lr": 3e-3,
    "warmup_steps": 5,
    "weight_decay": 0.01,
    "grad_clip": 1.0,
}


def deepspeed_config(
    cfg: Mapping[str, Any], precision: str, total_steps: int, parameters: int
) -> dict[str, Any]:
    """The DeepSpeed config for this job and a model of `parameters` elements; train_batch_size
    follows from the world size."""
    stage = int(cfg["zero_stage"])
    offload = str(cfg["offload"])
    if stage not in (2, 3):
        raise ValueError(f"zero_stage must be 2 or 3, got {stage}")
    if offload not in OFFLOADS:
        raise ValueError(f"offload must be one of {OFFLOADS}, got {offload!r}")
    if offload == "optimizer+params" and stage != 3:
        raise ValueError("offloading the parameters needs zero_stage 3")
    zero: dict[str, Any] = {
        "stage": stage,
        "contiguous_gradients": True,
        "overlap_comm": False,
        **bucket_sizes(parameters),
    }
    if offload != "none":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if offload == "optimizer+params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if stage == 3:
        # Gather the full weights at save time so a checkpoint also holds a usable model.
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    return {
        "train_micro_batch_size_per_gpu": int(cfg["batch_size"]),
        "gradient_accumulation_steps": int(cfg["grad_accum"]),
        "gradient_clipping": float(cfg["grad_clip"]),
        "zero_optimization": zero,
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": float(cfg["lr"]),
                "weight_decay": float(cfg["weight_decay"]),
                "torch_adam": True,
                "adam_w_mode": True,
            },
        },
        "scheduler": {
            "type": "WarmupDecayLR",
            "params": {
                "warmup_min_lr": 0.0,
                "warmup_max_lr": float(cfg["lr"]),
                "warmup_num_steps": int(cfg["warmup_steps"]),
                "total_num_steps": total_steps,
                "warmup_type": "linear",
            },
        },
        "fp16": {"enabled": precision == "fp16", "loss_scale": 0, "initial_scale_power": 16},
        "bf16": {"enabled": precision == "bf16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def bucket_sizes(parameters: int) -> dict[str, int]:
    """ZeRO's gradient and all-gather buckets, never larger than the model.

    DeepSpeed's defaults (5e8 elements) suit a model of billions of parameters: ZeRO-2 allocates
    its gradient bucket at that size whatever the model, and clears it every step (on two CPU
    ranks, the example's 0.1 M-parameter model spent most of each step clearing pages; on a T4
    it is a GB of its 16). A bucket the size of the model still holds every gradient at once,
    so the reductions, and the results, are those of the default.
    """
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    defaults = DeepSpeedZeroConfig.model_fields
    return {
        name: min(int(defaults[name].default), parameters)
        for name in ("reduce_bucket_size", "allgather_bucket_size")
    }


def validate_deepspeed_config(config: Mapping[str, Any]) -> Any:
    """DeepSpeed's own parse of the config; raises on what it rejects."""
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig(dict(config))


class DeepSpeedCausalLM(Trainer):
    def setup(self) -> None:
        import deepspeed

        cfg = {**DEFAULTS, **self.ctx.config}
        self.cfg = cfg
        _, precision = device_precision()
        settings = model_settings(cfg)
        self.corpus = CharCorpus.load(int(settings["block_size"]), int(settings["stride"]))
        self.sampler = ResumableSampler(
            self.corpus.num_windows,
            seed=self.ctx.seed,
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
        )
        # The runtime set up the process group already (gloo on CPU); DeepSpeed reuses it.
        deepspeed.init_distributed(dist_backend="gloo" if precision == "no" else "nccl")
        model = build_causal_lm(cfg, self.corpus.vocab_size)
        parameters = sum(p.numel() for p in model.parameters())
        config = deepspeed_config(cfg, precision, self.ctx.total_steps, parameters)
        # DeepSpeed imports its Muon optimizer here, which applies torch.compile at import:
        # that alone pulls in inductor (minutes on a busy CPU). Nothing here compiles.
        with torch._dynamo.config.patch(disable=True):
            self.engine, _, _, self.scheduler = deepspeed.initialize(
                model=model, model_parameters=model.parameters(), config=config
            )

    def train_step(self, step: int) -> Mapping[str, float]:
        started = time.monotonic()
        self.engine.train()
        losses = []
        for _ in range(int(self.cfg["grad_accum"])):
            ids = self.corpus.windows(self.sampler.take(int(self.cfg["batch_size"])))
            ids = ids.to(self.engine.device)
            loss = self.engine(input_ids=ids, labels=ids).loss
            self.engine.backward(loss)
            self.engine.step()  # applies the update at the accumulation boundary only
            losses.append(loss.detach().float())
        mean = torch.stack(losses).mean()
        torch.distributed.all_reduce(mean)
        pad_step(started, self.cfg.get("step_seconds"))
        return {
            "loss": float(mean.item()) / self.ctx.world_size,
            "lr": float(self.engine.get_lr()[0]),
        }

    def state_dict(self) -> dict[str, Any]:
        # Only the size matters here (the first save estimate); write_state saves the engine.
        return {"model": dict(self.model_tensors())}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None  # read_state restored the engine and the sampler

    def model_tensors(self) -> Mapping[str, Tensor]:
        """Full weights on every rank; under ZeRO-3 gathered (a collective: all ranks call)."""
        import deepspeed

        module = self.engine.module
        params = list(module.parameters())
        with deepspeed.zero.GatheredParameters(params, enabled=self.cfg["zero_stage"] == 3):
            return {name: t.detach().clone() for name, t in module.state_dict().items()}

    def write_state(self, directory: Path, state: dict[str, Any]) -> None:
        # Collective: rank 0 writes the module states, every rank its optimizer partition.
        self.engine.save_checkpoint(
            str(directory / DEEPSPEED_DIR),
            tag=CHECKPOINT_TAG,
            client_state={"sampler": self.sampler.state_dict()},
            save_latest=False,
        )

    def read_state(self, directory: Path) -> dict[str, Any]:
        _, client = self.engine.load_checkpoint(
            str(directory / DEEPSPEED_DIR), tag=CHECKPOINT_TAG, load_lr_scheduler_states=True
        )
        if client is None:
            raise ValueError(f"DeepSpeed found no checkpoint in {directory / DEEPSPEED_DIR}")
        self.sampler.load_state_dict(client["sampler"])
        return {}
