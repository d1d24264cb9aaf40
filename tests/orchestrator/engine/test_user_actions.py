"""User actions at awkward moments: never a 409 for the engine's own moves, never a failure for
a pause that came before the first step."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.config import Settings
from tests.factories import job_spec, wait_finished, wait_for
from worker.boundary.paths import SessionPaths

pytestmark = pytest.mark.slow


def _segments(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    return segments


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.02, 0.035, 0.05])
def test_a_cancel_right_after_submit_always_cancels(live_api: TestClient, delay: float) -> None:
    job_id = live_api.post("/api/v1/jobs", json=job_spec(total_steps=10_000)).json()["id"]
    time.sleep(delay)
    response = live_api.post(f"/api/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200, response.text
    assert response.json()["state"] == "cancelled"

    def settled(job: dict[str, Any]) -> bool:
        return all(s["state"] in ("cancelled", "failed") for s in _segments(live_api, job_id))

    wait_for(live_api, job_id, settled, timeout=60)
    assert live_api.get(f"/api/v1/jobs/{job_id}").json()["state"] == "cancelled"


def test_a_pause_before_the_first_step_pauses_instead_of_failing(
    live_api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    # The trainer's set-up waits for the gate until the pause has reached the session (its
    # control file says so): before its first step on any machine, however fast it starts.
    gate = tmp_path / "gate"
    spec = job_spec(total_steps=40, retry={"max_failures": 0}, config={"load_gate": str(gate)})
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]
    wait_for(live_api, job_id, lambda job: job["state"] == "running", timeout=60)
    assert live_api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
    deadline = time.monotonic() + 60  # a hang guard
    while not any(SessionPaths(root).control.exists() for root in settings.sessions_dir.iterdir()):
        assert time.monotonic() < deadline, "the pause never reached the session"
        time.sleep(0.05)
    gate.touch()

    paused = wait_for(live_api, job_id, lambda job: job["state"] != "running", timeout=120)
    assert paused["state"] == "paused", paused
    assert paused["failures"] == 0
    assert live_api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
    assert wait_finished(live_api, job_id)["state"] == "succeeded"
