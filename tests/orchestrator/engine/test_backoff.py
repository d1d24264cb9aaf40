"""The backoff arithmetic alone: exponential from the base, capped, half jittered, never sooner
than Retry-After or the backend's poll interval."""

from __future__ import annotations

import pytest

from orchestrator.engine.backoff import BASE_SECONDS, CAP_SECONDS, backoff_seconds


def _fixed(value: float) -> float:
    return backoff_seconds(1, rng=lambda: value)


@pytest.mark.parametrize(
    ("errors", "exponential"),
    [(0, 2.0), (1, 2.0), (2, 4.0), (3, 8.0), (9, 512.0), (10, 600.0), (60, 600.0)],
)
def test_the_delay_doubles_per_error_up_to_the_cap(errors: int, exponential: float) -> None:
    assert BASE_SECONDS == 2.0
    assert CAP_SECONDS == 600.0
    # Equal jitter: half the exponential is fixed, the other half scales with the draw.
    assert backoff_seconds(errors, rng=lambda: 0.0) == exponential / 2
    assert backoff_seconds(errors, rng=lambda: 0.5) == exponential * 3 / 4
    assert backoff_seconds(errors, rng=lambda: 1.0) == exponential


def test_jitter_spreads_jobs_that_failed_together() -> None:
    assert _fixed(0.0) < _fixed(0.25) < _fixed(0.75)


@pytest.mark.parametrize("retry_after", [30.0, 0.5, None])
def test_never_sooner_than_retry_after(retry_after: float | None) -> None:
    delay = backoff_seconds(3, retry_after, rng=lambda: 0.0)
    assert delay == max(4.0, retry_after or 0.0)


def test_never_sooner_than_the_poll_interval() -> None:
    assert backoff_seconds(1, floor=30.0, rng=lambda: 1.0) == 30.0
    assert backoff_seconds(1, 45.0, floor=30.0, rng=lambda: 1.0) == 45.0
    assert backoff_seconds(5, 1.0, floor=3.0, rng=lambda: 0.0) == 16.0
    assert isinstance(backoff_seconds(1, 5, rng=lambda: 0.0), float)
