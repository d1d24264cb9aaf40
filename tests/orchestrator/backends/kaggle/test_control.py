"""`baton cancel` and `baton pause` reach a running Kaggle kernel through its control channel
(issue 19), end to end: the API, the engine, the official client, the emulator and a real
session that polls the job's control dataset.

The clock is scaled 10x down: the kernel reads the channel every 6 s (60 s on Kaggle), the
orchestrator polls every 3 s (30 s), and "within 3 minutes" is within 18 s. Kaggle's own session
limit (120 s here, 20 minutes scaled) is what the session would otherwise run to.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.backends.kaggle.backend import kernel_slug
from tests.factories import (
    FAST_EMULATOR,
    kaggle_spec,
    make_settings,
    reference_digest,
    running_api,
    submit_with_secret,
    wait_finished,
    wait_for,
)
from tests.kaggle_emulator import Emulator, start_emulator
from tests.kaggle_emulator.kernel_sessions import KernelSession
from worker.boundary.paths import SessionPaths

pytestmark = pytest.mark.slow

SCALE = 0.1
REACH_SECONDS = 180 * SCALE
LIMIT_SECONDS = 120


def _spec(total_steps: int) -> dict[str, Any]:
    # The checkpoint goes through Baton (transport: orchestrator): with the in-kernel transport a
    # first session keeps a third of itself (chain_reserve_seconds, capped) to publish.
    return kaggle_spec(
        {"enable_internet": True, "control_poll_seconds": 60 * SCALE, "transport": "orchestrator"},
        total_steps=total_steps,
        session={"limit_seconds": LIMIT_SECONDS, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )


def _segments(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    return segments


@contextmanager
def _listening_job(
    tmp_path: Path, spec: dict[str, Any]
) -> Iterator[tuple[TestClient, Emulator, str]]:
    """A submitted job whose kernel has the key attached as a Secret, with the API running."""
    settings = make_settings(tmp_path / "data", kaggle_poll_seconds=30 * SCALE)
    with start_emulator(tmp_path / "kaggle", **FAST_EMULATOR) as emulator:
        job_id = submit_with_secret(settings, emulator, spec)
        with running_api(settings, kaggle_url=emulator.url) as api:
            yield api, emulator, job_id


def _log(session: KernelSession) -> str:
    try:
        return SessionPaths(session.root).log.read_text(errors="replace")
    except OSError:
        return ""


def _training_and_listening(emulator: Emulator, job_id: str) -> KernelSession:
    deadline = time.monotonic() + 120
    while True:
        sessions = emulator.sessions(f"alice/{kernel_slug(job_id)}")
        log = _log(sessions[-1]) if sessions else ""
        if "listening for the owner's commands" in log and "INFO step " in log:
            return sessions[-1]
        assert time.monotonic() < deadline, [_log(s)[-2000:] for s in sessions]
        time.sleep(0.2)


def _ended_within(session: KernelSession, asked_at: float) -> float:
    deadline = time.monotonic() + LIMIT_SECONDS
    while session.ended_at is None:
        assert time.monotonic() < deadline, _log(session)[-3000:]
        time.sleep(0.1)
    return session.ended_at - asked_at


def test_cancel_ends_a_running_kaggle_session_within_three_scaled_minutes(tmp_path: Path) -> None:
    with _listening_job(tmp_path, _spec(total_steps=100_000)) as (api, emulator, job_id):
        session = _training_and_listening(emulator, job_id)
        asked_at = time.time()
        assert api.post(f"/api/v1/jobs/{job_id}/cancel").json()["state"] == "cancelled"
        took = _ended_within(session, asked_at)

        def segment_cancelled(_: dict[str, Any]) -> bool:
            return [seg["state"] for seg in _segments(api, job_id)] == ["cancelled"]

        wait_for(api, job_id, segment_cancelled, timeout=60)
        log = _log(session)
    print(f"cancel: the session ended {took:.1f} s after it ({took / SCALE / 60:.2f} scaled min)")
    assert took <= REACH_SECONDS, (took, log[-3000:])
    assert "the owner asks to cancel" in log
    # Through the control dataset, never CancelKernelSession (Kaggle exposes no session id).
    assert emulator.calls("CancelKernelSession") == []
    assert emulator.dataset(f"alice/baton-ctl-{job_id}") is not None
    # Nothing was committed for a cancelled segment.
    assert not (session.root / "working" / "checkpoint").exists()


def test_pause_commits_and_ends_the_session_and_the_job_resumes_to_the_uninterrupted_digest(
    tmp_path: Path,
) -> None:
    spec = _spec(total_steps=800)
    with _listening_job(tmp_path, spec) as (api, emulator, job_id):
        session = _training_and_listening(emulator, job_id)
        asked_at = time.time()
        api.post(f"/api/v1/jobs/{job_id}/pause")
        took = _ended_within(session, asked_at)
        wait_for(api, job_id, lambda job: job["state"] == "paused", timeout=60)
        [paused] = _segments(api, job_id)
        log = _log(session)
        assert api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
        job = wait_finished(api, job_id, timeout=300)
        segments = _segments(api, job_id)
    print(f"pause: the session ended {took:.1f} s after it ({took / SCALE / 60:.2f} scaled min)")
    assert took <= REACH_SECONDS, (took, log[-3000:])
    assert "the owner asks to pause" in log
    assert paused["state"] == "succeeded", paused
    assert paused["outcome"] == "stopped"
    assert 0 < paused["end_step"] < 800
    # Ended long before Kaggle's limit: the pause, not the deadline, stopped it.
    assert session.ended_at is not None
    assert session.started_at is not None
    assert session.ended_at - session.started_at < LIMIT_SECONDS / 2
    assert job["state"] == "succeeded", job
    committed = [seg for seg in segments if seg["state"] == "succeeded"]
    assert committed[1]["start_step"] == paused["end_step"]
    assert committed[-1]["end_step"] == 800
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == reference_digest(spec, tmp_path / "reference")
