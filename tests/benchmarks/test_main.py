"""`make bench` (`python -m benchmarks`) stays runnable: its smoke workload, one session a way,
goes through all four ways, Baton's REST API included, and each ends with the same model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.workload import SMOKE
from tests.benchmarks.conftest import EntryPoint


@pytest.mark.timeout(900)
def test_the_smoke_run_trains_the_same_model_four_ways(
    entry_point: EntryPoint, tmp_path: Path
) -> None:
    out = tmp_path / "smoke.json"
    printed = entry_point("benchmarks", "--smoke", "--no-doc", "--out", out, timeout=840)
    record = json.loads(out.read_text())
    ways = {way["key"]: way for way in record["ways"]}
    assert set(ways) == {"a", "b", "c", "d"}
    assert record["workload"]["name"] == SMOKE.name
    for way in ways.values():
        assert way["final_step"] == SMOKE.total_steps, way
        assert way["digest"] == ways["a"]["digest"], way
    assert ways["b"]["notes"] == ["job succeeded"]
    assert "(b) job succeeded" in printed
