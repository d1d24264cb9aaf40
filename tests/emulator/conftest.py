"""Fixtures: an emulator per test, and the real kagglesdk client pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kagglesdk import KaggleClient

from tests.factories import fast_emulator
from tests.kaggle_emulator import Emulator
from tests.support.marks import starts_processes


@pytest.fixture
@starts_processes
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    with fast_emulator(tmp_path / "emulator") as running:
        yield running


@pytest.fixture
def client(emulator: Emulator) -> KaggleClient:
    return emulator.client()
