"""Hugging Face trainers with a test aid: a gate that holds the segment inside its load."""

from __future__ import annotations

import time
from pathlib import Path

from trainers.hf_lm import HFCausalLM

GATE_POLL_SECONDS = 0.05
WAITING_LOG = "setup waits for its gate"


class GatedHFCausalLM(HFCausalLM):
    """Config `load_gate` (absolute path): `setup` logs WAITING_LOG, then waits for that file.

    A test signals the worker while it waits, which is a pause during load on any machine.
    Training is HFCausalLM's, so the weights match its uninterrupted run.
    """

    def setup(self) -> None:
        gate = self.ctx.config.get("load_gate")
        if gate is not None:
            self.ctx.logger.info(WAITING_LOG)
            while not Path(str(gate)).exists():
                time.sleep(GATE_POLL_SECONDS)
        super().setup()
