"""Gates that hold a test trainer until the test opens them.

Config `load_gate` (absolute path): `setup` logs WAITING_LOG, then waits until that file
exists. A test that acts on the log line acts during the load, on any machine.
Config `step_gates` ({step: absolute path}): the step waits, before it trains, until its file
exists. A test that must see a session while it runs holds it there, on any machine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worker.trainer import TrainContext

GATE_POLL_SECONDS = 0.05
WAITING_LOG = "setup waits for its gate"


def wait_at_gate(ctx: TrainContext) -> None:
    gate = _gate(ctx.config)
    if gate is None:
        return
    ctx.logger.info(WAITING_LOG)
    while not gate.exists():
        time.sleep(GATE_POLL_SECONDS)


def wait_at_step_gate(ctx: TrainContext, step: int) -> None:
    gates = ctx.config.get("step_gates") or {}
    gate = gates.get(str(step))
    if gate is None:
        return
    while not Path(str(gate)).exists():
        time.sleep(GATE_POLL_SECONDS)


def _gate(config: Mapping[str, Any]) -> Path | None:
    value = config.get("load_gate")
    return Path(str(value)) if value is not None else None
