"""An emulator per test, and Baton's Kaggle account on it through the real client: the fixtures
of the Kaggle backend's tests (tests/orchestrator/backends/kaggle/) and of the client's
(tests/worker/kaggle_access/), each conftest importing them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.factories import emulator_clients, fast_emulator
from tests.kaggle_emulator import Emulator
from tests.support.marks import starts_processes
from worker.kaggle_access.client import KaggleAccount


@pytest.fixture
@starts_processes
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with fast_emulator(tmp_path / "emulator") as running:
        yield running


def account_on(
    emulator: Emulator, username: str = "alice", key: str = "alice-key"
) -> KaggleAccount:
    return KaggleAccount(username, key, emulator_clients(emulator.url), timeout_seconds=10)


@pytest.fixture
def alice(emulator: Emulator) -> KaggleAccount:
    return account_on(emulator)
