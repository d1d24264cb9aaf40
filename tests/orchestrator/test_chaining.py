"""End to end through the REST API: jobs chain across real, time-limited local sessions."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.backends.local.sessions import SessionState, session_state
from orchestrator.config import Settings
from tests.factories import (
    guaranteed_segments,
    job_spec,
    reference_digest,
    wait_finished,
    wait_for,
)

pytestmark = pytest.mark.slow

# 45 s of training steps against 15 s sessions, each spending 2-4 s starting Python and torch
# (more on a loaded machine): at least 4 sessions on any machine (guaranteed_segments), more on a
# slow one.
CHAINED = job_spec(
    total_steps=700,
    config={"step_sleep": 0.065},
    session={"limit_seconds": 15, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
)


def _segments(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    return segments


@pytest.mark.chained_digest
def test_job_chains_across_sessions_to_the_uninterrupted_digest(
    live_api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    job_id = live_api.post("/api/v1/jobs", json=CHAINED).json()["id"]
    job = wait_finished(live_api, job_id, timeout=560)
    assert job["state"] == "succeeded", job
    assert job["steps_done"] == CHAINED["total_steps"]

    segments = _segments(live_api, job_id)
    assert len(segments) >= guaranteed_segments(CHAINED) >= 2
    assert all(seg["state"] == "succeeded" for seg in segments)
    assert [seg["outcome"] for seg in segments][-1] == "completed"
    assert {seg["outcome"] for seg in segments[:-1]} == {"deadline"}
    # Contiguous: each segment starts exactly where the previous one committed.
    assert segments[0]["start_step"] == 0
    for before, after in itertools.pairwise(segments):
        assert after["start_step"] == before["end_step"] > before["start_step"]
    assert segments[-1]["end_step"] == CHAINED["total_steps"]
    for seg in segments:
        assert seg["checkpoint"]["step"] == seg["end_step"]
        assert seg["timings"]["total"] < seg["limit_seconds"]

    metrics = live_api.get(f"/api/v1/jobs/{job_id}/metrics").json()
    steps = [point["step"] for point in metrics]
    assert steps == sorted(steps)
    assert {point["segment_index"] for point in metrics} == {seg["index"] for seg in segments}

    final = segments[-1]["checkpoint"]["model_digest"]
    assert final == reference_digest(CHAINED, tmp_path)
    log = live_api.get(f"/api/v1/jobs/{job_id}/segments/0/log?tail=2000")
    assert log.headers["content-type"].startswith("text/plain")
    assert "stopping at step" in log.text
    assert len(log.text) <= 2000
    assert live_api.get(f"/api/v1/jobs/{job_id}/segments/99/log").status_code == 404
    # A finished job keeps only its final checkpoint's files; sessions keep no copies of them.
    stored = sorted(p.name for p in (settings.checkpoints_dir / job_id).iterdir())
    assert stored == [f"{segments[-1]['index']:05d}"]
    assert not list(settings.sessions_dir.glob("*/input"))


def test_kill_during_save_resumes_from_the_previous_commit(
    live_api: TestClient, tmp_path: Path
) -> None:
    marker = tmp_path / "killed-once"
    spec = {
        **CHAINED,
        "config": {**CHAINED["config"], "kill_during_save_segment": 1, "fault_marker": str(marker)},
    }
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_finished(live_api, job_id)
    assert job["state"] == "succeeded", job
    assert marker.exists()

    segments = _segments(live_api, job_id)
    killed = segments[1]
    assert (killed["state"], killed["end_step"], killed["checkpoint"]) == ("failed", None, None)
    # The retry starts from segment 0's commit, not from anything the killed save left behind.
    assert segments[2]["start_step"] == segments[0]["end_step"]
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    for before, after in itertools.pairwise(committed):
        assert after["start_step"] == before["end_step"]
    assert committed[-1]["checkpoint"]["model_digest"] == reference_digest(spec, tmp_path)


def test_crashing_trainer_fails_the_job_after_max_failures(live_api: TestClient) -> None:
    spec = job_spec(config={"fail_at_step": 3}, retry={"max_failures": 1})
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_finished(live_api, job_id)
    assert job["state"] == "failed"
    assert "2 consecutive failed segments" in job["reason"]
    assert "fail_at_step" in job["reason"] or "step 3" in job["reason"]
    segments = _segments(live_api, job_id)
    assert [seg["state"] for seg in segments] == ["failed", "failed"]
    # Resume retries a failed job with a fresh failure budget, from its last checkpoint.
    assert live_api.post(f"/api/v1/jobs/{job_id}/resume").json()["state"] == "queued"


def _wait_segment_running(api: TestClient, job_id: str) -> dict[str, Any]:
    def running(job: dict[str, Any]) -> bool:
        segments = _segments(api, job_id)
        return bool(segments) and segments[-1]["state"] == "running"

    wait_for(api, job_id, running, timeout=60)
    return _segments(api, job_id)[-1]


def _wait_training(settings: Settings, job_id: str, segment: dict[str, Any]) -> None:
    log = settings.sessions_dir / f"{job_id}-{segment['index']:04d}" / "log.txt"
    deadline = time.monotonic() + 60
    while "step 20/" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the session never started training"
        time.sleep(0.1)


def test_pause_commits_early_and_resume_continues_exactly(
    live_api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    spec = job_spec(total_steps=150, config={"step_sleep": 0.05, "log_every": 10})
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]
    _wait_training(settings, job_id, _wait_segment_running(live_api, job_id))
    job = live_api.post(f"/api/v1/jobs/{job_id}/pause").json()
    assert (job["state"], job["pause_requested"]) == ("running", True)
    assert live_api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 409

    paused = wait_for(live_api, job_id, lambda job: job["state"] == "paused", timeout=60)
    [stopped] = _segments(live_api, job_id)
    assert stopped["outcome"] == "stopped"
    assert 0 < stopped["end_step"] < 150
    assert paused["steps_done"] == stopped["end_step"]

    assert live_api.post(f"/api/v1/jobs/{job_id}/resume").json()["state"] == "queued"
    assert wait_finished(live_api, job_id)["state"] == "succeeded"
    final = _segments(live_api, job_id)[-1]
    assert final["start_step"] == stopped["end_step"]
    assert final["checkpoint"]["model_digest"] == reference_digest(spec, tmp_path)


def test_cancel_kills_the_running_session(live_api: TestClient, settings: Settings) -> None:
    spec = job_spec(total_steps=10_000, config={"step_sleep": 0.05})
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]
    segment = _wait_segment_running(live_api, job_id)
    assert live_api.post(f"/api/v1/jobs/{job_id}/cancel").json()["state"] == "cancelled"

    def segment_cancelled(job: dict[str, Any]) -> bool:
        return _segments(live_api, job_id)[-1]["state"] == "cancelled"

    wait_for(live_api, job_id, segment_cancelled, timeout=30)
    session = settings.sessions_dir / f"{job_id}-{segment['index']:04d}"
    deadline = time.monotonic() + 120  # a hang guard
    while session_state(session) is not SessionState.FINISHED:
        assert time.monotonic() < deadline, "the session outlived its cancellation"
        time.sleep(0.1)
    assert json.loads((session / "status.json").read_text())["cancelled"] is True
    assert live_api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 409
