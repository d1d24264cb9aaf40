"""LoraCausalLM: LoRA (or QLoRA on a GPU) fine-tuning of a causal LM through accelerate.

The base model is frozen; peft adds rank-r adapters to the target modules. The checkpoint holds
only what resume needs and the base model cannot rebuild: the adapter weights, their optimizer
state, the scheduler and the sampler (the runtime adds each rank's RNGs). The base weights come
back from where they came from: the config (a tiny model built from the seed, as in the tests)
or `pretrained_path`, a model directory mounted as a Kaggle input.

Config keys: those of AccelerateCausalLM, plus
    lora: {r: 8, alpha: 16, dropout: 0.05, target_modules: [q_proj, v_proj]}
    load_in_4bit: false     QLoRA: frozen weights in 4-bit NF4 with double quantisation
                            (needs CUDA, bitsandbytes and pretrained_path)
    pretrained_path: null   a local transformers model directory (nothing is downloaded)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from trainers.accelerate_lm import AccelerateCausalLM
from trainers.causal_lm import build_causal_lm
from worker.trainer import Trainer

LORA_DEFAULTS: dict[str, Any] = {
    "r": 8,
    "alpha": 16,
    "dropout": 0.05,
    "target_modules": ["q_proj", "v_proj"],
}


def lora_config(settings: Mapping[str, Any]) -> Any:
    from peft import LoraConfig

    merged = {**LORA_DEFAULTS, **settings}
    return LoraConfig(
        r=int(merged["r"]),
        lora_alpha=int(merged["alpha"]),
        lora_dropout=float(merged["dropout"]),
        target_modules=list(merged["target_modules"]),
        task_type="CAUSAL_LM",
    )


def load_base_model(cfg: Mapping[str, Any], vocab_size: int) -> Any:
    """The frozen base: built from the config, or loaded from a local directory (4-bit on GPU)."""
    path = cfg.get("pretrained_path")
    if path is None:
        if cfg.get("load_in_4bit"):
            raise ValueError(
                "load_in_4bit needs pretrained_path: 4-bit weights are quantised on load"
            )
        return build_causal_lm(cfg, vocab_size)
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    if not cfg.get("load_in_4bit"):
        return AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    if not torch.cuda.is_available():
        raise ValueError("load_in_4bit (QLoRA) needs a CUDA GPU: bitsandbytes quantises on it")
    from peft import prepare_model_for_kbit_training

    quantization = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float16,  # a T4 has no bf16
    )
    model = AutoModelForCausalLM.from_pretrained(
        path, quantization_config=quantization, local_files_only=True
    )
    return prepare_model_for_kbit_training(model)


class LoraCausalLM(AccelerateCausalLM):
    def build_model(self, cfg: Mapping[str, Any]) -> Any:
        from peft import get_peft_model

        base = load_base_model(cfg, self.corpus.vocab_size)
        return get_peft_model(base, lora_config(cfg.get("lora") or {}))

    def state_dict(self) -> dict[str, Any]:
        from peft import get_peft_model_state_dict

        return {
            "adapter": get_peft_model_state_dict(self.accelerator.unwrap_model(self.model)),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "sampler": self.sampler.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.accelerator.unwrap_model(self.model), state["adapter"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.sampler.load_state_dict(state["sampler"])

    # Adapters and their optimizer state only, in the base Trainer's one rank-0 file, not
    # AccelerateCausalLM's save_state, which would save the frozen base model too.
    write_state = Trainer.write_state
    read_state = Trainer.read_state

    def adapter_tensors(self) -> Mapping[str, Tensor]:
        from peft import get_peft_model_state_dict

        tensors: Mapping[str, Tensor] = get_peft_model_state_dict(
            self.accelerator.unwrap_model(self.model)
        )
        return tensors
