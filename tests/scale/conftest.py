"""A private Redis, a fresh PostgreSQL schema, the Kaggle emulator and a Baton cluster on them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scale.cluster import ScaleRig, started_rig
from tests.support.marks import starts_processes


@pytest.fixture
@starts_processes
def rig(tmp_path: Path) -> Iterator[ScaleRig]:
    """Started: API, two workers and beat, on their own Redis and PostgreSQL schema."""
    emulator = {
        "queue_seconds": 0.2,
        "dataset_processing_seconds": 0.5,
        "dataset_not_found_seconds": 0.3,
    }
    with started_rig(
        tmp_path,
        emulator,
        BATON_RECONCILE_INTERVAL_SECONDS="0.3",
        BATON_BEAT_INTERVAL_SECONDS="0.5",
        BATON_KAGGLE_POLL_SECONDS="0.5",
        BATON_CLAIM_LEASE_SECONDS="4",
        BATON_DISPATCH_GUARD_SECONDS="4",
    ) as rig:
        yield rig
