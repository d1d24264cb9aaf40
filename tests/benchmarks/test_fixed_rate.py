"""The load benchmark's arithmetic: nearest-rank percentiles, the per-phase summary, its worst
second and the machine's CPU shares."""

from __future__ import annotations

import psutil
import pytest

from benchmarks.fixed_rate import machine_share, percentile, summarize


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]  # 100 .. 1, unsorted on purpose
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([7.0], 99) == 7.0
    # 99th of 10 values is the largest: a p99 over few samples is the worst one.
    assert percentile([float(v) for v in range(10)], 99) == 9


def test_summary_reports_milliseconds_rate_client_lag_and_the_worst_second() -> None:
    # Sent at 0.1 s, 0.6 s, 1.2 s and 1.7 s into the phase: the slow ones are in second 1.
    scheduled = [0.1, 0.6, 1.2, 1.7]
    latencies = [0.010, 0.020, 0.030, 0.040]
    machine = {"busy_pct": 50.0}
    result = summarize("job", scheduled, latencies, [0.0, 0.002], 1, 2.0, machine)
    assert (result.p50_ms, result.p99_ms, result.max_ms) == (20.0, 40.0, 40.0)
    assert result.worst_second_p99_ms == 40.0
    assert result.achieved_rate == pytest.approx(2.0)
    assert result.max_send_lag_ms == 2.0
    assert result.errors == 1
    assert result.machine == machine
    # The worst second is that window's own p99: one slow request in a quiet second stands out
    # though the phase's p99 hides it.
    scheduled = [index / 200 for index in range(200)] + [1.2, 1.7]
    latencies = [0.005] * 201 + [0.3]
    spiky = summarize("job", scheduled, latencies, [0.0], 0, 2.0, {})
    assert (spiky.p99_ms, spiky.worst_second_p99_ms) == (5.0, 300.0)


def test_machine_share_splits_the_cpu_into_busy_niced_iowait_and_steal() -> None:
    cpu_times = type(psutil.cpu_times())  # this platform's named tuple
    before = cpu_times(**dict.fromkeys(cpu_times._fields, 0.0))
    # 10 s of CPU: 3 busy (Linux counts guest time inside user already), 2 niced, 4 idle, and
    # 0.5 each of iowait and steal.
    spent = {"user": 2.0, "nice": 2.0, "system": 1.0, "idle": 4.0, "iowait": 0.5, "steal": 0.5}
    after = before._replace(**{k: v for k, v in spent.items() if k in cpu_times._fields})
    if "guest" in cpu_times._fields:
        after = after._replace(guest=1.0)
    assert machine_share(before, after) == {
        "busy_pct": 30.0,
        "nice_pct": 20.0,
        "iowait_pct": 5.0,
        "steal_pct": 5.0,
    }
