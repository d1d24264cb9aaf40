"""TinyCharLM: a small character-level transformer on public-domain poems, for CPU demos.

Corpus: trainers/data/corpus.txt, English poems published before 1927 (Shakespeare, Poe, Blake,
Keats, Tennyson, Dickinson and others), transcribed for this repository.

Every piece of resumable state is real: dropout draws from the global RNG, AdamW keeps moments,
a LambdaLR warmup-then-cosine schedule, a GradScaler (enabled on CUDA only, saved either way)
and a ResumableSampler over overlapping windows of the text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from worker.sampler import ResumableSampler
from worker.trainer import Trainer

CORPUS = Path(__file__).parent / "data" / "corpus.txt"

DEFAULTS: dict[str, Any] = {
    "n_layer": 2,
    "d_model": 64,
    "n_head": 4,
    "block_size": 64,
    "stride": 32,  # window starts every 32 chars: about 1250 windows, 78 steps an epoch
    "batch_size": 16,
    "dropout": 0.1,
    "lr": 3e-3,
    "min_lr_ratio": 0.1,
    "warmup_steps": 50,
    "weight_decay": 0.1,
    "grad_clip": 1.0,
    # Pad every step to at least this long (seconds): a step time that does not depend on the
    # machine, for demos and tests whose segment count must not either. Training is unchanged.
    "min_step_seconds": 0.0,
    "device": "auto",  # "auto": CUDA when available, else CPU
}


class Block(nn.Module):
    """Pre-norm transformer block with causal self-attention."""

    def __init__(self, d_model: int, n_head: int, dropout: float) -> None:
        super().__init__()
        self.n_head = n_head
        self.dropout = dropout
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model),
            nn.GELU(),
            nn.Linear(4 * d_model, d_model),
            nn.Dropout(dropout),
        )
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        batch, time, channels = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(channels, dim=2)
        shape = (batch, time, self.n_head, channels // self.n_head)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        attn = attn.transpose(1, 2).contiguous().view(batch, time, channels)
        x = x + self.resid_dropout(self.proj(attn))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    def __init__(self, vocab: int, cfg: Mapping[str, Any]) -> None:
        super().__init__()
        d_model = int(cfg["d_model"])
        self.token = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(int(cfg["block_size"]), d_model)
        self.dropout = nn.Dropout(float(cfg["dropout"]))
        self.blocks = nn.ModuleList(
            Block(d_model, int(cfg["n_head"]), float(cfg["dropout"]))
            for _ in range(int(cfg["n_layer"]))
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: Tensor) -> Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.dropout(self.token(idx) + self.position(positions))
        for block in self.blocks:
            x = block(x)
        logits: Tensor = self.head(self.ln_f(x))
        return logits


def warmup_cosine(warmup: int, total: int, min_ratio: float) -> Any:
    """LR multiplier: linear warmup, then cosine decay to min_ratio at `total` steps."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


class TinyCharLM(Trainer):
    def setup(self) -> None:
        cfg = {**DEFAULTS, **self.ctx.config}
        self.cfg = cfg
        device = cfg["device"]
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        text = CORPUS.read_text(encoding="utf-8")
        chars = sorted(set(text))
        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.data = torch.tensor([self.stoi[ch] for ch in text], dtype=torch.long)
        self.block = int(cfg["block_size"])
        self.stride = int(cfg["stride"])
        windows = (len(self.data) - self.block - 1) // self.stride + 1
        self.sampler = ResumableSampler(
            windows, seed=self.ctx.seed, rank=self.ctx.rank, world_size=self.ctx.world_size
        )
        self.model = CharTransformer(len(chars), cfg).to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"])
        )
        schedule = warmup_cosine(
            int(cfg["warmup_steps"]), self.ctx.total_steps, float(cfg["min_lr_ratio"])
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, schedule)
        use_amp = self.device.type == "cuda"
        self.scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
        self.autocast = (
            (lambda: torch.autocast("cuda", dtype=torch.float16)) if use_amp else nullcontext
        )

    def _batch(self) -> tuple[Tensor, Tensor]:
        starts = torch.tensor(self.sampler.take(int(self.cfg["batch_size"]))) * self.stride
        offsets = torch.arange(self.block + 1)
        windows = self.data[starts[:, None] + offsets[None, :]].to(self.device)
        return windows[:, :-1], windows[:, 1:]

    def train_step(self, step: int) -> Mapping[str, float]:
        started = time.perf_counter()
        metrics = self._train_step()
        pad = float(self.cfg["min_step_seconds"]) - (time.perf_counter() - started)
        if pad > 0:
            time.sleep(pad)
        return metrics

    def _train_step(self) -> Mapping[str, float]:
        self.model.train()
        inputs, targets = self._batch()
        with self.autocast():
            logits = self.model(inputs)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), float(self.cfg["grad_clip"]))
        lr = self.scheduler.get_last_lr()[0]
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        return {"loss": loss.item(), "lr": lr, "grad_norm": grad_norm.item()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "sampler": self.sampler.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.sampler.load_state_dict(state["sampler"])

    def model_tensors(self) -> Mapping[str, Tensor]:
        return self.model.state_dict()
