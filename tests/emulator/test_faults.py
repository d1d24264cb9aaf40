"""Injected faults: failed calls have no side effect; a lost response does; auth errors are 401."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import requests
from kagglesdk import KaggleClient

from tests.emulator import calls
from tests.factories import FAST_EMULATOR
from tests.kaggle_emulator import Emulator, FaultKind, start_emulator


def test_ten_percent_faults_never_leave_side_effects(emulator: Emulator) -> None:
    emulator.faults.rate = 0.1
    emulator.faults.reseed(7)
    client = emulator.client()
    accepted = 0
    for i in range(40):
        try:
            if i % 2:
                calls.quota(client)
            elif not calls.push(client, f"alice/k{i % 4}", "pass\n").error:
                accepted += 1
        except (requests.HTTPError, requests.ConnectionError):
            client = emulator.client()  # a dropped connection may leave the session unusable
    assert len(emulator.faults.injected) >= 2
    assert {kind for _, kind in emulator.faults.injected} <= {
        FaultKind.RATE_LIMITED,
        FaultKind.SERVER_ERROR,
        FaultKind.DROP,
    }
    assert sum(emulator.push_counts.values()) == accepted
    assert len(emulator.sessions()) == accepted


def test_faults_are_deterministic_for_a_seed(tmp_path: Path) -> None:
    def run(root: Path) -> list[tuple[str, FaultKind]]:
        with start_emulator(root, **FAST_EMULATOR) as emulator:
            emulator.faults.rate = 0.3
            emulator.faults.reseed(3)
            for _ in range(15):
                with contextlib.suppress(requests.HTTPError, requests.ConnectionError):
                    calls.quota(emulator.client())
            return list(emulator.faults.injected)

    assert run(tmp_path / "a") == run(tmp_path / "b")


@pytest.mark.parametrize(
    ("kind", "error", "status"),
    [
        (FaultKind.RATE_LIMITED, requests.HTTPError, 429),
        (FaultKind.SERVER_ERROR, requests.HTTPError, 500),
        (FaultKind.DROP, requests.ConnectionError, None),
    ],
)
def test_a_failed_push_starts_nothing(
    emulator: Emulator,
    client: KaggleClient,
    kind: FaultKind,
    error: type[Exception],
    status: int | None,
) -> None:
    emulator.faults.fail_next("SaveKernel", kind)
    with pytest.raises(error) as raised:
        calls.push(client, "alice/once", "pass\n")
    if status is not None:
        assert raised.value.response.status_code == status
    assert emulator.push_counts == {}
    assert emulator.sessions() == []


def test_a_lost_response_push_still_runs_and_get_kernel_reveals_it(
    emulator: Emulator, client: KaggleClient
) -> None:
    emulator.faults.fail_next("SaveKernel", FaultKind.LOST_RESPONSE)
    with pytest.raises(requests.ConnectionError):
        calls.push(client, "alice/lost", "pass\n")
    assert emulator.push_counts == {"alice/lost": 1}
    # Ask before pushing again: the version exists, so this segment was launched.
    fresh = emulator.client()
    assert calls.get_kernel(fresh, "alice/lost").metadata.current_version_number == 1
    calls.wait_for(fresh, "alice/lost", calls.TERMINAL)


def test_429_carries_retry_after(emulator: Emulator, client: KaggleClient) -> None:
    emulator.faults.retry_after_seconds = 3
    emulator.faults.fail_next("GetAcceleratorQuotaStatistics", FaultKind.RATE_LIMITED)
    with pytest.raises(requests.HTTPError) as raised:
        calls.quota(client)
    assert raised.value.response.headers["Retry-After"] == "3"


def test_wrong_key_is_401(emulator: Emulator) -> None:
    wrong = emulator.client()
    wrong.http_client()._password = "not-the-key"
    with pytest.raises(requests.HTTPError) as raised:
        calls.quota(wrong)
    assert raised.value.response.status_code == 401
    assert "not-the-key" not in raised.value.response.text
