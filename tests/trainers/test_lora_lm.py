"""LoRA through peft: what the base model is built from (its chain runs in
test_chained_digest.py, which also checks that only the adapters are saved)."""

import pytest

from trainers.lora_lm import load_base_model


def test_4bit_needs_a_pretrained_model_to_quantise_on_load():
    with pytest.raises(ValueError, match="load_in_4bit needs pretrained_path"):
        load_base_model({"load_in_4bit": True}, vocab_size=64)
