"""An emulator per test, and Baton's Kaggle account on it through the real client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import emulator_clients
from tests.kaggle_emulator import Emulator, start_emulator
from worker.kaggle_access.client import KaggleAccount

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


def account_on(
    emulator: Emulator, username: str = "alice", key: str = "alice-key"
) -> KaggleAccount:
    return KaggleAccount(username, key, emulator_clients(emulator.url), timeout_seconds=10)


@pytest.fixture
def alice(emulator: Emulator) -> KaggleAccount:
    return account_on(emulator)
