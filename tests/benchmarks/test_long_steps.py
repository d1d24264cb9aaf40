"""`python -m benchmarks.long_steps` stays runnable: a short scaled run (1000x: 0.15 s steps in a
43.2 s session) stops on its deadline, commits, and prints the measured share beside the
projection."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.long_steps import LongStepRun
from tests.benchmarks.conftest import EntryPoint


def test_a_short_scaled_run_measures_its_share_beside_the_projection(
    entry_point: EntryPoint, tmp_path: Path
) -> None:
    out = entry_point("benchmarks.long_steps", "--scale", "1000", "--out", tmp_path / "run.json")
    assert "in completed steps, of the session:" in out
    assert "after start-up:" in out
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["outcome"] == "deadline"
    run = LongStepRun(**{k: record[k] for k in LongStepRun.__dataclass_fields__})
    assert run.session == 43.2
    assert 0 < run.share < run.after_startup_share <= 1
    assert 0 < run.projected_share <= 1
    # Every second of the session is accounted for: start-up, steps, the save, and what is left.
    assert run.unused >= 0
