"""A tiny randomly initialised transformers causal LM and its data, shared by the LM trainers.

Nothing is downloaded: the model is built from a `LlamaConfig` (a few hundred thousand
parameters by default) and the data is the repository's public-domain poem corpus, read
character by character. The same builders serve the accelerate, Hugging Face Trainer,
DeepSpeed and LoRA trainers, so their results can be compared with each other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

CORPUS = Path(__file__).parent / "data" / "corpus.txt"

MODEL_DEFAULTS: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "attention_dropout": 0.1,  # dropout draws from the RNG, so resume must restore it
    "block_size": 32,
    "stride": 64,
}


@dataclass(frozen=True)
class CharCorpus:
    """The corpus as token ids, cut into overlapping windows of `block` tokens."""

    tokens: Tensor
    vocab_size: int
    block: int
    stride: int

    @classmethod
    def load(cls, block: int, stride: int) -> CharCorpus:
        text = CORPUS.read_text(encoding="utf-8")
        stoi = {ch: i for i, ch in enumerate(sorted(set(text)))}
        tokens = torch.tensor([stoi[ch] for ch in text], dtype=torch.long)
        return cls(tokens=tokens, vocab_size=len(stoi), block=block, stride=stride)

    @property
    def num_windows(self) -> int:
        return (len(self.tokens) - self.block) // self.stride + 1

    def windows(self, indices: list[int]) -> Tensor:
        starts = torch.tensor(indices, dtype=torch.long) * self.stride
        return self.tokens[starts[:, None] + torch.arange(self.block)[None, :]]

    def __getitem__(self, index: int) -> Tensor:
        return self.windows([index])[0]

    def __len__(self) -> int:
        return self.num_windows


def model_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    return {key: config.get(key, default) for key, default in MODEL_DEFAULTS.items()}


def build_causal_lm(config: Mapping[str, Any], vocab_size: int) -> Any:
    """A LlamaForCausalLM from the job config's sizes, initialised from the global torch RNG."""
    from transformers import LlamaConfig, LlamaForCausalLM

    settings = model_settings(config)
    llama = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=int(settings["hidden_size"]),
        intermediate_size=int(settings["intermediate_size"]),
        num_hidden_layers=int(settings["num_hidden_layers"]),
        num_attention_heads=int(settings["num_attention_heads"]),
        num_key_value_heads=int(settings["num_attention_heads"]),
        max_position_embeddings=int(settings["block_size"]),
        attention_dropout=float(settings["attention_dropout"]),
        tie_word_embeddings=False,
    )
    # Eager attention: the same kernels on every machine, so digests compare across them.
    return LlamaForCausalLM._from_config(llama, attn_implementation="eager")


def choose_precision(device_type: str, bf16_supported: bool) -> str:
    """Mixed precision for the device: bf16 where it exists, fp16 with a grad scaler on older
    GPUs such as the T4 (no bf16), and full fp32 on CPU."""
    if device_type != "cuda":
        return "no"
    return "bf16" if bf16_supported else "fp16"


def device_precision() -> tuple[str, str]:
    """(device type, accelerate mixed_precision) for this process."""
    if torch.cuda.is_available():
        return "cuda", choose_precision("cuda", torch.cuda.is_bf16_supported())
    return "cpu", "no"


def warmup_linear(warmup: int, total: int) -> Any:
    """LR multiplier: linear warmup to 1, then linear decay to 0.1 at `total`."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.1, 1.0 - 0.9 * (step - warmup) / max(1, total - warmup))

    return factor


def pad_step(started: float, step_seconds: Any) -> None:
    """Sleep out the rest of a fixed step duration (`started` from time.monotonic), so tests
    control the step time rather than depend on the machine's speed."""
    if step_seconds:
        remaining = float(step_seconds) - (time.monotonic() - started)
        if remaining > 0:
            time.sleep(remaining)
