"""A crashing trainer's job says what happened in one line; the traceback stays in its log."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from orchestrator.config import Settings
from tests.factories import job_spec, make_settings, running_api, wait_finished


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


# Its API runs the reconcile loop, which starts the job's sessions.
@pytest.mark.slow
def test_a_failure_text_with_nul_and_a_lone_surrogate_is_retried_then_fails_in_one_line(
    tmp_path: Path, database_url: str
) -> None:
    # PostgreSQL refuses NUL and lone surrogates in text: a reason holding them once failed the
    # job at once with an internal error, skipping its retries.
    settings = make_settings(tmp_path / "data", database_url=database_url)
    spec = job_spec(
        config={"fail_at_step": 2, "fail_with_unstorable_text": True}, retry={"max_failures": 2}
    )
    with running_api(settings) as client:
        job_id = client.post("/api/v1/jobs", json=spec).json()["id"]
        job = wait_finished(client, job_id)
        segments = client.get(f"/api/v1/jobs/{job_id}/segments").json()
    assert job["state"] == "failed"
    assert len(segments) == 3  # the first try and max_failures retries
    for text in (job["reason"], *(segment["error"] for segment in segments)):
        assert "RuntimeError: CUDA error\ufffd at step 2 \ufffd injected" in text
        assert "\n" not in text
        assert "internal error" not in text
