"""A segment's timings column is read back through SessionTimings exactly as it was written."""

from __future__ import annotations

from orchestrator.session_timings import SessionTimings
from worker.boundary.contract import Timings


def test_measured_timings_round_trip_through_the_column() -> None:
    worker = Timings(startup=1.0, load=2.0, train=30.0, save=4.0, upload=5.0, total=42.0)
    written = SessionTimings.measured(worker, session=50.0, step_ema=0.25)
    assert SessionTimings.from_json(written.to_json()) == written
    assert (written.setup, written.tail) == (3.0, 9.0)


def test_a_segment_that_measured_nothing_has_no_timings() -> None:
    assert SessionTimings.from_json(None) is None
    assert SessionTimings.from_json({}) is None


def test_an_older_row_with_missing_phases_reads_them_as_unmeasured() -> None:
    timings = SessionTimings.from_json({"save": 2.0, "retired_phase": 9.0})
    assert timings == SessionTimings(save=2.0)
    assert (timings.setup, timings.tail) == (0.0, 2.0)
