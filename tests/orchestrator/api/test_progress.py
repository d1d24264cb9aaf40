"""Live progress through the API: a running local session's heartbeat, not an estimate."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.factories import job_spec, wait_for


def test_a_running_local_job_shows_its_heartbeat(live_api: TestClient) -> None:
    # Slow steps in one long session: steps_done stays 0 until the session ends.
    spec = job_spec(total_steps=10_000, config={"step_sleep": 0.05})
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_for(
        live_api,
        job_id,
        lambda job: job["progress"] is not None and job["progress"]["step"] >= 3,
        timeout=180,
    )
    progress = job["progress"]
    assert job["steps_done"] == 0
    assert progress["estimated"] is False
    assert progress["segment_index"] == 0
    assert progress["loss"] is not None
    assert progress["metrics"]["loss"] == progress["loss"]
    assert set(progress["metrics"]) == {"loss", "lr"}  # what the test trainer's step returns
    assert progress["step_seconds"] >= 0.05
    assert job["eta"] is not None
    listed = live_api.get("/api/v1/jobs").json()["items"][0]
    assert listed["progress"]["step"] >= progress["step"]
    assert live_api.post(f"/api/v1/jobs/{job_id}/cancel").status_code == 200
