"""Fixtures: an emulator per test, and the real kagglesdk client pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kagglesdk import KaggleClient

from tests.kaggle_emulator import Emulator, start_emulator

FAST = {
    "queue_seconds": 0.2,
    "grace_seconds": 0.5,
    "dataset_processing_seconds": 0.6,
    "dataset_not_found_seconds": 0.2,
}


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with start_emulator(tmp_path / "emulator", **FAST) as running:
        yield running
        assert running.internal_errors == []


@pytest.fixture
def client(emulator: Emulator) -> KaggleClient:
    return emulator.client()
