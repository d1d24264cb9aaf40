"""The quota arithmetic, paging and wire formats as pure functions."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from kagglesdk.kernels.types.kernels_api_service import (
    ApiGetAcceleratorQuotaStatisticsResponse,
)

from tests.kaggle_emulator import wire
from tests.kaggle_emulator.accelerators import Accelerator, accelerator_for
from tests.kaggle_emulator.errors import ApiError
from tests.kaggle_emulator.paging import page
from tests.kaggle_emulator.quota import QuotaWeek, reserved_seconds, used_seconds


def test_weeks_start_at_the_epoch() -> None:
    week = QuotaWeek(epoch=100.0, length=30.0)
    assert week.start(100.0) == 100.0
    assert week.start(129.9) == 100.0
    assert week.start(130.0) == 130.0
    assert week.refresh_time(131.0) == 160.0


def test_used_counts_only_this_week_and_running_sessions_up_to_now() -> None:
    intervals = [(90.0, 110.0), (115.0, None), (50.0, 60.0)]
    assert used_seconds(intervals, week_start=100.0, now=120.0) == 10.0 + 5.0


def test_reserved_is_what_is_left_of_running_limits() -> None:
    assert reserved_seconds([(0.0, 60.0), (0.0, 5.0)], now=10.0) == 50.0


@pytest.mark.parametrize(
    ("shape", "gpu", "tpu", "expected"),
    [
        ("NvidiaTeslaT4", False, False, Accelerator.GPU),
        ("NvidiaL4", False, False, Accelerator.GPU),
        ("TpuV5E8", False, False, Accelerator.TPU),
        (None, True, False, Accelerator.GPU),
        (None, False, True, Accelerator.TPU),
        (None, False, False, Accelerator.NONE),
    ],
)
def test_accelerator_for(shape: str | None, gpu: bool, tpu: bool, expected: Accelerator) -> None:
    assert accelerator_for(shape, gpu, tpu) is expected


def test_paging_walks_every_item_once() -> None:
    items = list(range(45))
    seen, token = [], None
    while True:
        chunk, token = page(items, None, token, default_size=20)
        seen.extend(chunk)
        if token is None:
            break
    assert seen == items


def test_a_forged_page_token_is_a_400() -> None:
    with pytest.raises(ApiError) as error:
        page([1, 2], 1, "not-a-token", default_size=20)
    assert error.value.status == 400


def test_durations_over_a_day_survive_the_client_parser() -> None:
    reply = {
        "gpuQuota": {"timeUsed": wire.duration(29.5 * 3600), "totalTimeAllowed": "108000s"},
        "quotaRefreshTime": wire.timestamp(1_800_000_000.0),
    }
    parsed = ApiGetAcceleratorQuotaStatisticsResponse.from_dict(reply)
    assert parsed.gpu_quota.time_used == timedelta(hours=29, minutes=30)
    assert parsed.gpu_quota.total_time_allowed == timedelta(hours=30)
    assert parsed.quota_refresh_time == datetime(2027, 1, 15, 8, 0)
