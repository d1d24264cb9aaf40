"""The load benchmark's arithmetic: nearest-rank percentiles and the per-phase summary."""

from __future__ import annotations

import pytest

from benchmarks.fixed_rate import percentile, summarize


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 100 .. 1, unsorted on purpose
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7.0], 99) == 7.0
    # 99th of 10 values is the largest: a p99 over few samples is the worst one.
    assert percentile([float(v) for v in range(10)], 99) == 9


def test_summary_reports_milliseconds_rate_and_client_lag() -> None:
    result = summarize("job", [0.010, 0.020, 0.030, 0.040], [0.0, 0.002], errors=1, elapsed=2.0)
    assert (result.p50_ms, result.p99_ms, result.max_ms) == (20.0, 40.0, 40.0)
    assert result.achieved_rate == pytest.approx(2.0)
    assert result.max_send_lag_ms == 2.0
    assert result.errors == 1
