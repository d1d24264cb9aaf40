"""Hugging Face trainers with a test aid: a gate that holds the segment inside its load."""

from __future__ import annotations

from tests.support.gates import wait_at_gate
from trainers.hf_lm import HFCausalLM


class GatedHFCausalLM(HFCausalLM):
    """HFCausalLM whose `setup` waits at `load_gate` (tests.support.gates) first.

    Training is HFCausalLM's, so the weights match its uninterrupted run.
    """

    def setup(self) -> None:
        wait_at_gate(self.ctx)
        super().setup()
