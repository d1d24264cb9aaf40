"""`python -m benchmarks.kaggle_calendar` stays runnable: a job of a tenth of a week's quota, on
the emulator, ends inside its first week, and the figures hold together."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.kaggle_calendar import run

pytestmark = pytest.mark.slow


def test_a_small_job_runs_and_reports_against_the_bound(tmp_path: Path) -> None:
    figures = run(hour=1.0, weeks_of_work=0.1, root=tmp_path)
    assert figures["quota_weeks"] == 1
    assert figures["charged_gpu_seconds"] >= figures["training_seconds"]
    # Inside one week the bound is the charged time itself, and no calendar beats it.
    assert figures["minimum_seconds"] == pytest.approx(figures["charged_gpu_seconds"])
    assert figures["calendar_seconds"] >= figures["minimum_seconds"]
    assert figures["naive_seconds"] == figures["minimum_seconds"]
