"""`python -m benchmarks.session_start` stays runnable: one session each way, both measured."""

from __future__ import annotations

import pytest

from benchmarks.session_start import report, run


# The benchmark starts local sessions, cold and from a warm host.
@pytest.mark.slow
def test_one_session_each_way_is_measured_and_reported() -> None:
    figures = run(sessions=1)
    for way in ("cold", "warm"):
        assert figures[way]["sessions"] == 1
        assert 0 < figures[way]["startup"] < figures[way]["total"] < figures[way]["wall"]
    printed = report(figures)
    assert "Local session start, 1 sessions of 3 steps each way" in printed
    assert "Warm starts save" in printed
