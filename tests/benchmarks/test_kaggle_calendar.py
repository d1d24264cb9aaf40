"""`python -m benchmarks.kaggle_calendar` stays runnable: a job of a tenth of a week's quota, on
the emulator, ends inside its first week, and the figures hold together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.benchmarks.conftest import EntryPoint


def test_a_small_job_runs_and_reports_against_the_bound(
    entry_point: EntryPoint, tmp_path: Path
) -> None:
    out = tmp_path / "kaggle-calendar.json"
    # fmt: off
    entry_point(
        "benchmarks.kaggle_calendar", "--hour-seconds", "1", "--weeks-of-work", "0.1",
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
