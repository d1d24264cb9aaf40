"""The benchmark's workload: TinyCharLM paced like an accelerator step, plus its run settings.

Every way trains this same spec, so the final model digests are comparable bit for bit.
`step_sleep` stands for the time a GPU step keeps the host waiting: it makes the step time
realistic relative to start-up and keeps it steady while other processes share the CPU. The wait
comes at the end of the step, where a GPU step's host blocks (on `loss.item()`, after the
optimizer step was queued): the state has moved on but the step has not returned yet.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainers.tiny_lm import TinyCharLM

TRAINER_ENTRY = "benchmarks.workload:PacedCharLM"


class PacedCharLM(TinyCharLM):
    """TinyCharLM whose step ends by waiting `step_sleep` seconds, as if for a device."""

    def train_step(self, step: int) -> Mapping[str, float]:
        metrics = super().train_step(step)
        time.sleep(float(self.ctx.config.get("step_sleep", 0.0)))
        return metrics


class TimedPacedCharLM(PacedCharLM):
    """PacedCharLM that reports each step's own wall time (`step_seconds`), so a run can show
    the step times the deadline rule saw (benchmarks.long_steps)."""

    def train_step(self, step: int) -> Mapping[str, float]:
        started = time.perf_counter()
        metrics = dict(super().train_step(step))
        metrics["step_seconds"] = time.perf_counter() - started
        metrics["ended_at"] = time.time()
        return metrics


@dataclass(frozen=True)
class Workload:
    """What to train and how the sessions are cut: shared by all four ways."""

    name: str
    total_steps: int
    session_seconds: float  # the session limit (b), (c), (d) run under
    save_every: int  # (c): the periodic save interval, like HF `save_steps`
    signal_delay_s: int  # (d): submitit's warning before the limit (USR2)
    seed: int = 0
    config: dict[str, Any] = field(
        default_factory=lambda: {
            "n_layer": 2,
            "d_model": 64,
            "n_head": 4,
            "block_size": 64,
            "batch_size": 16,
            "threads": 1,
            "log_every": 25,
            "step_sleep": 0.04,
        }
    )
    trainer: str = TRAINER_ENTRY
    grace_seconds: float = 5.0  # SIGTERM -> SIGKILL at a session's limit (Baton's default)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "total_steps": self.total_steps,
            "session_seconds": self.session_seconds,
            "save_every": self.save_every,
            "signal_delay_s": self.signal_delay_s,
            "seed": self.seed,
            "config": dict(self.config),
            "trainer": self.trainer,
            "grace_seconds": self.grace_seconds,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workload:
        return cls(**data)


# ~5 sessions of 15 s: each spends ~5 s starting Python + torch and loading, ~8 s in steps.
FULL = Workload(name="full", total_steps=450, session_seconds=15, save_every=40, signal_delay_s=2)
# 2-3 sessions of 11 s: a short run of the comparison.
QUICK = Workload(name="quick", total_steps=140, session_seconds=11, save_every=20, signal_delay_s=2)
# One session a way, 30 steps inside a 60 s limit on any machine: CI's smoke run of the entry
# point (tests/benchmarks/test_entry_points.py), not a measurement.
SMOKE = Workload(name="smoke", total_steps=30, session_seconds=60, save_every=10, signal_delay_s=2)


def job_spec(workload: Workload) -> dict[str, Any]:
    """The workload as a Baton job spec (JSON for `POST /api/v1/jobs`), with default margins."""
    return {
        "name": f"benchmark-{workload.name}",
        "backend": "local",
        "trainer": workload.trainer,
        "config": dict(workload.config),
        "total_steps": workload.total_steps,
        "seed": workload.seed,
        "session": {"limit_seconds": workload.session_seconds},
    }
