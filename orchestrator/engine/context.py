"""What every phase of the engine works with: the database, the one clock and the checkpoints."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from orchestrator.db import Database
from orchestrator.engine.checkpoints import CheckpointStore
from orchestrator.trackers.sync import TrackerSync


@dataclass(frozen=True)
class Context:
    db: Database
    clock: Callable[[], datetime]
    store: CheckpointStore
    trackers: TrackerSync
    # The operator lets Kaggle jobs continue locally when their quota runs out.
    allow_local_fallback: bool = False
