"""Multi-rank trainers with an injected fault: one rank kills itself mid-segment."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from trainers.accelerate_lm import AccelerateCausalLM


class RankKillingAccelerateLM(AccelerateCausalLM):
    """Config `kill_rank` and `kill_at_step`: that rank SIGKILLs itself when that step begins.

    `fault_marker` (absolute path) arms the fault once: the dying rank writes the time of its
    death there first, so a retry runs clean and the test can time the teardown.
    """

    def train_step(self, step: int) -> Mapping[str, float]:
        config = self.ctx.config
        if step == config.get("kill_at_step") and self.ctx.rank == config.get("kill_rank"):
            marker = Path(str(config["fault_marker"]))
            if not marker.exists():
                marker.write_text(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
        return super().train_step(step)
