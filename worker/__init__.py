"""Baton's in-session worker: resumes a segment, trains to the deadline, commits a checkpoint.

`import worker` stays free of torch (the orchestrator imports the contract and manifest
modules); the torch-backed names below load on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.checkpoint import ResumeState, commit_checkpoint, load_checkpoint
    from worker.deadline import SessionBudget
    from worker.digest import model_digest
    from worker.rng import capture_rng_state, restore_rng_state, seed_everything
    from worker.sampler import ResumableSampler
    from worker.stopflag import StopFlag
    from worker.trainer import TrainContext, Trainer

_LAZY = {
    "ResumeState": "worker.checkpoint",
    "commit_checkpoint": "worker.checkpoint",
    "load_checkpoint": "worker.checkpoint",
    "SessionBudget": "worker.deadline",
    "model_digest": "worker.digest",
    "capture_rng_state": "worker.rng",
    "restore_rng_state": "worker.rng",
    "seed_everything": "worker.rng",
    "ResumableSampler": "worker.sampler",
    "StopFlag": "worker.stopflag",
    "TrainContext": "worker.trainer",
    "Trainer": "worker.trainer",
}

__all__ = [
    "ResumableSampler",
    "ResumeState",
    "SessionBudget",
    "StopFlag",
    "TrainContext",
    "Trainer",
    "capture_rng_state",
    "commit_checkpoint",
    "load_checkpoint",
    "model_digest",
    "restore_rng_state",
    "seed_everything",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
