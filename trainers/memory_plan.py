"""Memory planner: per-GPU bytes of a training run, before it is launched. Pure arithmetic.

Model (per GPU, in bytes):

- Model states follow the ZeRO paper (Rajbhandari et al., 2020): mixed-precision Adam keeps
  2 bytes of half-precision weights, 2 of gradients and 12 of fp32 optimizer state (master
  weights, momentum, variance) per trainable parameter: 16 in all; fp32 Adam is 4 + 4 + 8, also
  16. Frozen parameters (LoRA) cost only their weights: 2 bytes in fp16/bf16, 4 in fp32, about
  0.52 in 4-bit NF4 with double quantisation (4.127 bits, the QLoRA paper). LoRA adapters train
  in fp32 (4 + 4 + 8). ZeRO stage 1 splits the optimizer state across ranks, stage 2 the
  gradients too, stage 3 the weights too; offload moves the optimizer state (and with
  "optimizer+params" the weights) to CPU memory.
- Activations follow Korthikanti et al. (2022), "Reducing Activation Recomputation": a
  transformer layer keeps s·b·h·(34 + 5·a·s/h) bytes in 16-bit training (doubled in fp32);
  full gradient checkpointing keeps 2·s·b·h per layer plus one layer's worth during recompute.
  The logits add b·s·V in fp32 twice (the values and their gradient).
- A fixed CUDA overhead per process (context, cuBLAS workspace, allocator slack).

`plan_memory` gives the breakdown; `suggest_fit` applies the cheapest changes, in order of how
little they cost in speed, until the plan fits the GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

GB = 1e9
T4_BYTES = 16 * GB  # what the user sees as "16 GB"; about 15 GB is usable
T4_USABLE_BYTES = 15.0 * GB
CUDA_OVERHEAD_BYTES = 0.5 * GB
WEIGHT_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "nf4": 4.127 / 8}
ACTIVATION_SCALE = {"fp32": 2.0, "fp16": 1.0, "bf16": 1.0}
ADAM_STATE_BYTES_MIXED = 12.0  # fp32 master weights, momentum, variance
ADAM_STATE_BYTES_FP32 = 8.0  # momentum, variance
OFFLOAD_CHOICES = ("none", "optimizer", "optimizer+params")


@dataclass(frozen=True)
class ModelShape:
    """A decoder's sizes, as in a transformers config."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    intermediate: int | None = None

    @property
    def params(self) -> int:
        """Attention (4·h²) and a gated MLP (3·h·i, or 8·h² for 4h plain) per layer, plus
        untied input and output embeddings."""
        ffn = (
            3 * self.hidden * self.intermediate
            if self.intermediate
            else 8 * self.hidden * self.hidden
        )
        return self.layers * (4 * self.hidden * self.hidden + ffn) + 2 * self.vocab * self.hidden


@dataclass(frozen=True)
class TrainingSetup:
    """What decides a run's memory. `params` defaults to the shape's count."""

    shape: ModelShape
    batch: int  # per GPU and micro-step
    seq_len: int
    precision: str = "fp16"  # fp32 | fp16 | bf16 (the compute and weight precision)
    params: int | None = None
    trainable_share: float = 1.0  # LoRA: trainable / total
    quantize_4bit: bool = False  # frozen weights in NF4 (QLoRA)
    zero_stage: int = 0
    offload: str = "none"
    gradient_checkpointing: bool = False
    ranks: int = 1

    @property
    def total_params(self) -> int:
        return self.params if self.params is not None else self.shape.params


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU bytes by kind."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    overhead: float = CUDA_OVERHEAD_BYTES

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead

    def fits(self, gpu_bytes: float = T4_USABLE_BYTES) -> bool:
        return self.total <= gpu_bytes

    def describe(self) -> str:
        parts = ("weights", "gradients", "optimizer", "activations", "overhead")
        shown = ", ".join(f"{name} {getattr(self, name) / GB:.2f}" for name in parts)
        return f"{self.total / GB:.1f} GB per GPU ({shown} GB)"


def plan_memory(setup: TrainingSetup) -> MemoryPlan:
    if setup.precision not in ACTIVATION_SCALE:
        raise ValueError(f"precision must be one of {sorted(ACTIVATION_SCALE)}")
    if setup.offload not in OFFLOAD_CHOICES:
        raise ValueError(f"offload must be one of {OFFLOAD_CHOICES}")
    total = float(setup.total_params)
    trainable = total * setup.trainable_share
    frozen = total - trainable
    mixed = setup.precision != "fp32"
    lora = setup.trainable_share < 1.0
    if lora:  # adapters train in fp32 next to frozen base weights
        frozen_bytes = WEIGHT_BYTES["nf4" if setup.quantize_4bit else setup.precision]
        weights = frozen * frozen_bytes + trainable * 4.0
        gradients = trainable * 4.0
        optimizer = trainable * ADAM_STATE_BYTES_FP32
    else:
        weights = total * WEIGHT_BYTES[setup.precision]
        gradients = total * WEIGHT_BYTES[setup.precision]
        optimizer = total * (ADAM_STATE_BYTES_MIXED if mixed else ADAM_STATE_BYTES_FP32)
    ranks = max(1, setup.ranks)
    if setup.zero_stage >= 1:
        optimizer /= ranks
    if setup.zero_stage >= 2:
        gradients /= ranks
    if setup.zero_stage >= 3:
        weights /= ranks
    if setup.offload != "none":
        optimizer = 0.0
    if setup.offload == "optimizer+params":
        weights = 0.0 if setup.zero_stage >= 3 else weights
    return MemoryPlan(
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        activations=activation_bytes(setup),
    )


def activation_bytes(setup: TrainingSetup) -> float:
    shape, s, b = setup.shape, setup.seq_len, setup.batch
    h, a = shape.hidden, shape.heads
    scale = ACTIVATION_SCALE[setup.precision]
    full_layer = s * b * h * (34 + 5 * a * s / h) * scale
    if setup.gradient_checkpointing:
        layers = shape.layers * 2 * s * b * h * scale + full_layer
    else:
        layers = shape.layers * full_layer
    logits = 2 * b * s * shape.vocab * 4.0
    return layers + logits


# Changes in order of what they cost: recomputation first (about 20-30 % slower), then a
# smaller micro-batch (same effective batch through accumulation), then sharding across the
# ranks, then offload (PCIe-bound), then training fewer parameters, which changes the result.
Change = tuple[str, Callable[[TrainingSetup], TrainingSetup | None]]


def _checkpointing(s: TrainingSetup) -> TrainingSetup | None:
    if s.gradient_checkpointing:
        return None
    return dataclasses.replace(s, gradient_checkpointing=True)


def _halve_batch(s: TrainingSetup) -> TrainingSetup | None:
    return dataclasses.replace(s, batch=s.batch // 2) if s.batch > 1 else None


def _zero_up(s: TrainingSetup) -> TrainingSetup | None:
    if s.ranks < 2 or s.zero_stage >= 3:
        return None
    return dataclasses.replace(s, zero_stage=s.zero_stage + 1)


def _offload(s: TrainingSetup) -> TrainingSetup | None:
    return dataclasses.replace(s, offload="optimizer") if s.offload == "none" else None


def _lora(s: TrainingSetup) -> TrainingSetup | None:
    return dataclasses.replace(s, trainable_share=0.01) if s.trainable_share >= 1.0 else None


def _four_bit(s: TrainingSetup) -> TrainingSetup | None:
    if s.trainable_share >= 1.0 or s.quantize_4bit:
        return None
    return dataclasses.replace(s, quantize_4bit=True)


CHANGES: tuple[Change, ...] = (
    ("enable gradient checkpointing", _checkpointing),
    ("halve the per-GPU batch (double grad_accum)", _halve_batch),
    ("raise the ZeRO stage", _zero_up),
    ("offload the optimizer state to CPU", _offload),
    ("train LoRA adapters (about 1 % of the weights)", _lora),
    ("load the frozen weights in 4-bit NF4 (QLoRA)", _four_bit),
)


@dataclass(frozen=True)
class FitAdvice:
    plan: MemoryPlan
    fits: bool
    changes: tuple[str, ...]  # the cheapest changes that make it fit, in order; () if it fits
    fitted: MemoryPlan | None  # the plan after those changes; None if nothing fits

    def message(self, gpu_bytes: float = T4_USABLE_BYTES) -> str:
        need = f"needs about {self.plan.describe()}; a T4 has {gpu_bytes / GB:.0f} GB usable"
        if self.fits:
            return f"fits: {need}"
        if self.fitted is None:
            return f"does not fit even with every change Baton knows: {need}"
        return f"will not fit: {need}. Cheapest change that fits: {'; '.join(self.changes)} " + (
            f"({self.fitted.total / GB:.1f} GB)"
        )


def suggest_fit(setup: TrainingSetup, gpu_bytes: float = T4_USABLE_BYTES) -> FitAdvice:
    """Apply changes in cost order, each as often as it helps, until the plan fits."""
    plan = plan_memory(setup)
    if plan.fits(gpu_bytes):
        return FitAdvice(plan, True, (), plan)
    current = setup
    for _, change in CHANGES:
        while (changed := change(current)) is not None:
            current = changed
            fitted = plan_memory(current)
            if fitted.fits(gpu_bytes):
                return FitAdvice(plan, False, describe_changes(setup, current), fitted)
    return FitAdvice(plan, False, describe_changes(setup, current), None)


def describe_changes(before: TrainingSetup, after: TrainingSetup) -> tuple[str, ...]:
    """What differs between two setups, in the order of CHANGES, as a user would apply it."""
    said: list[str] = []
    if after.gradient_checkpointing and not before.gradient_checkpointing:
        said.append(CHANGES[0][0])
    if after.batch != before.batch:
        factor = before.batch // after.batch
        said.append(
            f"per-GPU batch {before.batch} -> {after.batch} "
            f"(grad_accum x{factor} keeps the effective batch)"
        )
    if after.zero_stage != before.zero_stage:
        said.append(f"raise the ZeRO stage {before.zero_stage} -> {after.zero_stage}")
    if after.offload != before.offload:
        said.append(CHANGES[3][0])
    if after.trainable_share != before.trainable_share:
        said.append(CHANGES[4][0])
    if after.quantize_4bit and not before.quantize_4bit:
        said.append(CHANGES[5][0])
    return tuple(said)


def setup_from_config(config: Mapping[str, Any], ranks: int, precision: str) -> TrainingSetup:
    """A TrainingSetup from a Baton LM trainer's config (transformers-style sizes)."""
    lora = config.get("lora") or {}
    shape = ModelShape(
        layers=int(config.get("num_hidden_layers", 2)),
        hidden=int(config.get("hidden_size", 64)),
        heads=int(config.get("num_attention_heads", 4)),
        vocab=int(config.get("vocab_size", 128)),
        intermediate=int(config["intermediate_size"]) if "intermediate_size" in config else None,
    )
    return TrainingSetup(
        shape=shape,
        batch=int(config.get("batch_size", 1)),
        seq_len=int(config.get("block_size", config.get("seq_len", 512))),
        precision=precision,
        params=int(config["model_params"]) if "model_params" in config else None,
        trainable_share=float(lora.get("trainable_share", 0.01)) if lora else 1.0,
        quantize_4bit=bool(lora.get("load_in_4bit", False)) if lora else False,
        zero_stage=int(config.get("zero_stage", 0)),
        offload=str(config.get("offload", "none")),
        gradient_checkpointing=bool(config.get("gradient_checkpointing", False)),
        ranks=ranks,
    )


def check_t4_job(config: Mapping[str, Any], ranks: int) -> FitAdvice:
    """The advice for a job on Kaggle's T4s (fp16: a T4 has no bf16)."""
    return suggest_fit(setup_from_config(config, ranks, "fp16"))


# What a checkpoint of a Baton LM trainer holds, for the Kaggle space checks at submit.
FP32_BYTES = 4
NF4_BYTES = 0.5
ADAM_MOMENTS_BYTES = 8  # two fp32 moments per trainable parameter


@dataclass(frozen=True)
class CheckpointSize:
    """The predicted bytes of one checkpoint: the weights saved, and the optimizer state."""

    weights: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.optimizer


def checkpoint_size(config: Mapping[str, Any], ranks: int) -> CheckpointSize:
    """Every weight in fp32 (NF4 for a 4-bit frozen base) plus Adam's two fp32 moments for each
    trainable parameter: ZeRO partitions are saved by every rank, so the whole adds up the same."""
    setup = setup_from_config(config, ranks, "fp16")
    total = setup.total_params
    trainable = total * setup.trainable_share
    frozen = total - trainable
    weights = trainable * FP32_BYTES + frozen * (NF4_BYTES if setup.quantize_4bit else FP32_BYTES)
    return CheckpointSize(weights=weights, optimizer=trainable * ADAM_MOMENTS_BYTES)
