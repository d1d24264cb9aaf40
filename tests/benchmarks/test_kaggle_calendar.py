"""`python -m benchmarks.kaggle_calendar` stays runnable: a job of a twentieth of a week's quota,
on the emulator, ends inside its first week, and the figures hold together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.conftest import EntryPoint


def test_a_small_job_runs_and_reports_against_the_bound(
    entry_point: EntryPoint, tmp_path: Path
) -> None:
    out = tmp_path / "kaggle-calendar.json"
    # The benchmark's own 4 s hour (48 s sessions, a 120 s weekly quota) and 6 s of steps: one
    # week's quota however slow start-up is. At 1 s an hour (12 s sessions, a 30 s quota) Python
    # and torch start-up on a loaded machine used the quota up into a second week.
    # fmt: off
    entry_point(
        "benchmarks.kaggle_calendar", "--hour-seconds", "4", "--weeks-of-work", "0.05",
        "--out", out,
    )
    # fmt: on
    figures = json.loads(out.read_text())
    assert figures["quota_weeks"] == 1
    assert figures["charged_gpu_seconds"] >= figures["training_seconds"]
    # Inside one week the bound is the charged time itself, and no calendar beats it.
    assert figures["minimum_seconds"] == pytest.approx(figures["charged_gpu_seconds"])
    assert figures["calendar_seconds"] >= figures["minimum_seconds"]
    assert figures["naive_seconds"] == figures["minimum_seconds"]
