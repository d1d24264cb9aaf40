"""Trainers' whole runs and first segments, made once per test run by whichever test process
needs one first (support/chains.py)."""

from __future__ import annotations

import pytest

from tests.support.chains import ChainRuns
from tests.support.marks import starts_processes


@pytest.fixture(scope="session")
@starts_processes
def chain_runs(tmp_path_factory: pytest.TempPathFactory) -> ChainRuns:
    return ChainRuns(tmp_path_factory)
