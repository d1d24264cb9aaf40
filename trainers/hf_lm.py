"""HFCausalLM: a tiny causal LM trained by the Hugging Face `Trainer`, chained by Baton.

The `Trainer` owns the loop; Baton joins through `worker.hf` (a callback for the stop decision,
the Trainer's own checkpoint files inside Baton's atomic commit, resume without replay).

Config keys (all optional): the model sizes of `trainers.causal_lm.MODEL_DEFAULTS`, and
batch_size, grad_accum, lr, warmup_steps, weight_decay, gradient_checkpointing, eval_every (the
Trainer evaluates on the corpus's first EVAL_WINDOWS windows every this many steps; 0: never),
step_seconds (test aid: pad every step to this duration).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers import TrainerCallback, TrainingArguments

from trainers.causal_lm import (
    CharCorpus,
    build_causal_lm,
    device_precision,
    model_settings,
    pad_step,
)
from worker.hf import HFLoopTrainer, PositionedDataTrainer

DEFAULTS: dict[str, Any] = {
    "batch_size": 4,
    "grad_accum": 2,
    "lr": 3e-3,
    "warmup_steps": 5,
    "weight_decay": 0.01,
    "gradient_checkpointing": False,
    "eval_every": 0,
}
EVAL_WINDOWS = 16


def collate_causal(windows: list[torch.Tensor]) -> dict[str, torch.Tensor]:
    ids = torch.stack(windows)
    return {"input_ids": ids, "labels": ids}


class HFCausalLM(HFLoopTrainer):
    def build_trainer(self) -> PositionedDataTrainer:
        cfg = {**DEFAULTS, **self.ctx.config}
        settings = model_settings(cfg)
        corpus = CharCorpus.load(int(settings["block_size"]), int(settings["stride"]))
        model = build_causal_lm(cfg, corpus.vocab_size)
        if cfg["gradient_checkpointing"]:
            model.gradient_checkpointing_enable({"use_reentrant": False})
        device_type, precision = device_precision()
        eval_every = int(cfg["eval_every"])
        evaluation: dict[str, Any] = {}
        if eval_every > 0:
            evaluation = {
                "eval_strategy": "steps",
                "eval_steps": eval_every,
                "per_device_eval_batch_size": int(cfg["batch_size"]),
            }
        args = TrainingArguments(
            **self.training_arguments(
                per_device_train_batch_size=int(cfg["batch_size"]),
                gradient_accumulation_steps=int(cfg["grad_accum"]),
                learning_rate=float(cfg["lr"]),
                warmup_steps=int(cfg["warmup_steps"]),
                weight_decay=float(cfg["weight_decay"]),
                lr_scheduler_type="linear",
                use_cpu=device_type == "cpu",
                fp16=precision == "fp16",
                bf16=precision == "bf16",
                **evaluation,
            )
        )
        return PositionedDataTrainer(
            model=model,
            args=args,
            train_dataset=corpus,
            eval_dataset=(
                torch.utils.data.Subset(corpus, range(min(EVAL_WINDOWS, len(corpus))))
                if eval_every > 0
                else None
            ),
            data_collator=collate_causal,
            callbacks=[StepPacer(cfg.get("step_seconds"))],
        )


class StepPacer(TrainerCallback):
    """Pads every step to `step_seconds` when set (a test aid: it fixes the step time)."""

    def __init__(self, step_seconds: Any) -> None:
        self.step_seconds = step_seconds
        self.started = time.monotonic()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.started = time.monotonic()
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        pad_step(self.started, self.step_seconds)
        return control
