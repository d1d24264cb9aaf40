"""`python -m benchmarks.long_steps` stays runnable: a short scaled run (1000x: 0.15 s steps in a
43.2 s session) stops on its deadline, commits, and prints the measured share beside the
projection. The smoke run keeps a 5 s safety margin instead of the scaled 1 ms, so a save that
stalls on a busy machine is not cut by the session's limit."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.long_steps import (
    SECTION,
    LongStepRun,
    doc_section,
    kept_section,
    write_section,
)
from tests.benchmarks.conftest import EntryPoint


def test_a_short_scaled_run_measures_its_share_beside_the_projection(
    entry_point: EntryPoint, tmp_path: Path
) -> None:
    out = entry_point(
        "benchmarks.long_steps", "--scale", "1000", "--safety", "5", "--out", tmp_path / "run.json"
    )
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


def test_its_doc_section_is_replaced_in_place_and_kept_by_a_rewrite(tmp_path: Path) -> None:
    run = LongStepRun(
        scale=100.0,
        session=432.0,
        step=1.5,
        startup=3.0,
        save=0.1,
        train=428.5,
        steps=285,
        outcome="deadline",
        projected_in_steps=428.3,
        slowest_recent_step=1.5,
        projected_with_slowest=428.3,
        span=428.6,
        projected_span=428.3,
    )
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Latest figures\n\nold\n")
    write_section(doc_section(run, "Measured first."), doc)
    write_section(doc_section(run, "Measured again."), doc)
    text = doc.read_text()
    assert text.count(SECTION) == 1
    assert "Measured again." in text
    assert "Measured first." not in text
    assert text.startswith("# Benchmarks\n\n## Latest figures\n\nold\n")
    assert "| 99.88% | 99.84% | +0.05 points |" in text  # 428.5 s in steps of 429 s
    assert "| 99.91% | 99.84% | +0.07 points |" in text  # with the loop's bookkeeping
    assert "): met by the deadline margin (last row); met by the steps alone" in text
    assert kept_section(doc).startswith(SECTION)
    assert "Measured again." in kept_section(doc)
