"""`baton move`: a job moved Kaggle -> local -> Kaggle continues from its newest checkpoint on
each backend and ends on the uninterrupted digest (issue 18)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.factories import (
    kaggle_spec,
    make_settings,
    reference_digest,
    running_api,
    wait_finished,
    wait_for,
)
from tests.kaggle_emulator import start_emulator

pytestmark = pytest.mark.slow

KAGGLE = {"accelerator": "t4x2", "quota_reserve_seconds": 0}


def _paused(job: dict[str, Any]) -> bool:
    return bool(job["state"] == "paused")


def test_a_job_moved_kaggle_local_kaggle_ends_on_the_uninterrupted_digest(tmp_path: Path) -> None:
    spec = kaggle_spec(
        KAGGLE,
        total_steps=15,
        config={"step_sleep": 0.02, "stop_every_steps": 5},
        session={"limit_seconds": 120, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    with (
        start_emulator(
            tmp_path / "kaggle", queue_seconds=0.2, dataset_processing_seconds=0.5
        ) as emulator,
        running_api(make_settings(tmp_path / "data"), kaggle_url=emulator.url) as api,
    ):
        api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
        job_id = api.post("/api/v1/jobs", json=spec).json()["id"]
        wait_for(api, job_id, lambda job: job["state"] == "running", timeout=60)
        assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
        # A running job cannot move: 409.
        conflict = api.post(f"/api/v1/jobs/{job_id}/move", json={"backend": "local"})
        assert conflict.status_code == 409, conflict.text
        wait_for(api, job_id, _paused, timeout=180)

        moved = api.post(f"/api/v1/jobs/{job_id}/move", json={"backend": "local"})
        assert moved.status_code == 200, moved.text
        assert moved.json()["spec"]["backend"] == "local"
        pushes = sum(emulator.push_counts.values())
        assert api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
        wait_for(api, job_id, lambda job: job["state"] == "running", timeout=60)
        assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
        wait_for(api, job_id, _paused, timeout=180)
        assert sum(emulator.push_counts.values()) == pushes  # nothing ran on Kaggle

        back = api.post(f"/api/v1/jobs/{job_id}/move", json={"backend": "kaggle", "kaggle": KAGGLE})
        assert back.status_code == 200, back.text
        assert api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
        job = wait_finished(api, job_id, timeout=300)
        assert job["state"] == "succeeded", job
        segments = api.get(f"/api/v1/jobs/{job_id}/segments").json()
        events = api.get(f"/api/v1/jobs/{job_id}/events").json()

    assert sum(emulator.push_counts.values()) > pushes  # the end ran on Kaggle again
    assert [e["message"] for e in events if e["kind"] == "moved"][:1] == [
        "moved from kaggle to local; continues from step 5"
    ]
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    assert committed[-1]["end_step"] == 15
    reference = {**spec, "config": {"step_sleep": 0.02}}
    assert committed[-1]["checkpoint"]["model_digest"] == reference_digest(
        reference, tmp_path / "reference"
    )
