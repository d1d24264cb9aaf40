"""Properties of the backoff (orchestrator/engine/backoff.py), over error counts, Retry-After,
floors and every jitter draw."""

from __future__ import annotations

import math

from hypothesis import example, given
from hypothesis import strategies as st

from orchestrator.engine.backoff import BASE_SECONDS, CAP_SECONDS, backoff_seconds

# Up to a year of consecutive errors at the cap.
errors = st.integers(min_value=1, max_value=100_000)
jitter = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
optional_seconds = st.one_of(st.none(), st.floats(min_value=0.0, max_value=7200.0))
floors = st.floats(min_value=0.0, max_value=120.0)
# The last error count whose wait, doubled, is still under the cap.
UNCAPPED = int(math.log2(CAP_SECONDS / BASE_SECONDS))


@given(errors=errors, retry_after=optional_seconds, floor=floors, draw=jitter)
@example(errors=1025, retry_after=None, floor=0.0, draw=0.5)  # was an OverflowError: 2.0 * 2**1024
def test_never_sooner_than_retry_after_or_the_floor_nor_later_than_needed(
    errors: int, retry_after: float | None, floor: float, draw: float
) -> None:
    delay = backoff_seconds(errors, retry_after, floor=floor, rng=lambda: draw)
    assert delay >= (retry_after or 0.0)
    assert delay >= floor
    assert delay <= max(CAP_SECONDS, retry_after or 0.0, floor)


@given(errors=st.integers(min_value=1, max_value=UNCAPPED), first=jitter, second=jitter)
def test_a_later_error_never_waits_less_than_an_earlier_one_whatever_the_jitter(
    errors: int, first: float, second: float
) -> None:
    """Equal jitter keeps half of each wait fixed, so below the cap the waits of consecutive
    errors never overlap: the n-th lies in [BASE * 2^(n-1) / 2, BASE * 2^(n-1)]."""
    earlier = backoff_seconds(errors, rng=lambda: first)
    later = backoff_seconds(errors + 1, rng=lambda: second)
    assert later >= earlier
    assert BASE_SECONDS * 2 ** (errors - 1) / 2 <= earlier <= BASE_SECONDS * 2 ** (errors - 1)


@given(errors=errors, draw=jitter)
def test_the_wait_stays_within_the_cap_and_half_of_it_is_never_jittered_away(
    errors: int, draw: float
) -> None:
    delay = backoff_seconds(errors, rng=lambda: draw)
    exponential = min(CAP_SECONDS, BASE_SECONDS * 2 ** min(errors - 1, 64))
    assert exponential / 2 <= delay <= exponential
