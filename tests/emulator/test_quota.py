"""The weekly GPU quota: charged by session wall time on the emulator's clock, then exhausted."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from kagglesdk.kernels.types.kernels_enums import KernelWorkerStatus as S

from tests.emulator import calls
from tests.kaggle_emulator import ManualClock, start_emulator

SLEEP = "import time\ntime.sleep(600)\n"


def test_gpu_time_is_charged_then_exhausts_then_refreshes(tmp_path: Path) -> None:
    clock = ManualClock()
    options = {
        "clock": clock,
        "queue_seconds": 0.0,
        "grace_seconds": 0.5,
        "gpu_allowance_seconds": 10.0,
        "week_seconds": 30.0,
    }
    with start_emulator(tmp_path, **options) as emulator:
        client = emulator.client()
        before = calls.quota(client)
        # proto3 omits zero durations: before a first session there is no timeUsed at all.
        assert before.gpu_quota.time_used is None
        assert before.gpu_quota.time_reserved is None
        assert before.gpu_quota.total_time_allowed == timedelta(seconds=10)
        first_refresh = before.quota_refresh_time

        calls.push(client, "alice/gpu", SLEEP, machine_shape="NvidiaTeslaT4", timeout=60)
        calls.wait_for(client, "alice/gpu", {S.RUNNING})
        clock.advance(4)
        running = calls.quota(client).gpu_quota
        assert running.time_used == timedelta(seconds=4)
        assert running.time_reserved == timedelta(seconds=56)

        clock.advance(8)  # 12 s used of 10
        assert calls.quota(client).gpu_quota.time_used == timedelta(seconds=12)
        refused = calls.push(client, "alice/gpu-2", SLEEP, machine_shape="NvidiaTeslaT4")
        # Kaggle's text (field logs, issue 17): it names no refresh time.
        assert refused.error == "Maximum weekly GPU quota of 0.00 hours reached."
        assert not calls.push(client, "alice/cpu", "print('cpu is free')\n").error

        calls.cancel(client, emulator.latest_session_id("alice/gpu"))
        calls.wait_for(client, "alice/gpu", calls.TERMINAL)
        clock.advance(30)  # the next quota week
        after = calls.quota(client)
        assert after.gpu_quota.time_used is None  # zero: omitted
        assert after.quota_refresh_time == first_refresh + timedelta(seconds=30)
        assert not calls.push(
            client, "alice/gpu-3", "print(1)\n", machine_shape="NvidiaTeslaT4"
        ).error
        assert emulator.push_counts == {"alice/gpu": 1, "alice/cpu": 1, "alice/gpu-3": 1}


def test_cpu_sessions_do_not_use_gpu_quota(tmp_path: Path) -> None:
    clock = ManualClock()
    with start_emulator(tmp_path, clock=clock, queue_seconds=0.0, grace_seconds=0.5) as emulator:
        client = emulator.client()
        calls.push(client, "alice/cpu", SLEEP)
        calls.wait_for(client, "alice/cpu", {S.RUNNING})
        clock.advance(100)
        assert calls.quota(client).gpu_quota.time_used is None  # zero: omitted
