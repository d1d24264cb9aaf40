"""A crashing trainer's job says what happened in one line; the traceback stays in its log."""

from __future__ import annotations

from fastapi.testclient import TestClient

from orchestrator.config import Settings
from tests.factories import job_spec, wait_finished


def test_a_crash_reads_as_one_line_and_the_log_keeps_the_traceback(
    live_api: TestClient, settings: Settings
) -> None:
    spec = job_spec(config={"fail_at_step": 3}, retry={"max_failures": 0})
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_finished(live_api, job_id)
    assert job["state"] == "failed"
    [segment] = live_api.get(f"/api/v1/jobs/{job_id}/segments").json()

    server_paths = (str(settings.data_dir), "/site-packages/", "/worker/", "Traceback")
    for text in (job["reason"], segment["error"]):
        assert "RuntimeError: injected failure at step 3" in text
        assert "\n" not in text
        assert not [path for path in server_paths if path in text]
    log = live_api.get(f"/api/v1/jobs/{job_id}/segments/0/log").text
    assert "Traceback" in log
