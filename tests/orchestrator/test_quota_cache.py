"""The quota last seen per user feeds ETAs only while it is fresh."""

from __future__ import annotations

from datetime import UTC, datetime

from orchestrator.quota_cache import QuotaCache
from orchestrator.wire import QuotaOut

REFRESH = datetime(2026, 11, 23, 0, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _quota(hours: float) -> QuotaOut:
    return QuotaOut(
        account="alice",
        accelerator="t4x2",
        seconds_left=hours * 3600,
        refresh_at=REFRESH,
        allowance_seconds=30 * 3600,
    )


def test_a_fresh_quota_becomes_a_plan_and_a_stale_one_is_forgotten() -> None:
    clock = Clock()
    cache = QuotaCache(max_age=600, clock=clock)
    assert cache.plan("u1") is None
    cache.remember("u1", [_quota(4)])
    plan = cache.plan("u1")
    assert plan is not None
    assert (plan.seconds_left, plan.refresh_at, plan.allowance_seconds) == (
        4 * 3600,
        REFRESH,
        30 * 3600,
    )
    assert cache.plan("u2") is None  # one user's quota is not another's
    clock.now = 601
    assert cache.plan("u1") is None


def test_no_kaggle_account_means_no_plan() -> None:
    cache = QuotaCache()
    cache.remember("u1", [])
    assert cache.plan("u1") is None
