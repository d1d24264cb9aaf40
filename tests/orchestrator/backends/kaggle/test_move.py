"""`baton move`: a job moved Kaggle -> local -> Kaggle continues from its newest checkpoint on
each backend and ends on the uninterrupted digest, with either transport (issue 18); a job whose
Kaggle quota runs out continues locally where its spec and the operator allow it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.config import Settings
from tests.factories import (
    kaggle_spec,
    make_settings,
    reference_digest,
    running_api,
    submit_with_secret,
    wait_finished,
    wait_for,
)
from tests.kaggle_emulator import Emulator, start_emulator

pytestmark = pytest.mark.slow

MB = 10**6
KAGGLE = {"accelerator": "t4x2", "quota_reserve_seconds": 0}
# The in-kernel transport: each session publishes its checkpoint itself, and the orchestrator
# keeps a stub (the manifest and where the checkpoint lies).
IN_KERNEL = {**KAGGLE, "enable_internet": True, "chain_reserve_seconds": 10.0}


def _paused(job: dict[str, Any]) -> bool:
    return bool(job["state"] == "paused")


def _spec(kaggle: dict[str, Any]) -> dict[str, Any]:
    """15 steps, each session stopping itself after 5."""
    return kaggle_spec(
        kaggle,
        total_steps=15,
        config={"step_sleep": 0.02, "stop_every_steps": 5},
        session={"limit_seconds": 120, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )


def _uninterrupted(spec: dict[str, Any], workdir: Path) -> str:
    return reference_digest({**spec, "config": {"step_sleep": 0.02}}, workdir)


@contextmanager
def _submitted(
    tmp_path: Path, spec: dict[str, Any], settings: Settings
) -> Iterator[tuple[TestClient, Emulator, str]]:
    """The job submitted, the user's key attached to its kernel as a Kaggle Secret (before
    anything is pushed: the in-kernel transport needs it), and the orchestrator running."""
    with start_emulator(
        tmp_path / "kaggle", queue_seconds=0.2, dataset_processing_seconds=0.5
    ) as emulator:
        job_id = submit_with_secret(settings, emulator, spec)
        with running_api(settings, kaggle_url=emulator.url) as api:
            yield api, emulator, job_id
        assert emulator.internal_errors == []


def _messages(api: TestClient, job_id: str, kind: str) -> list[str]:
    events = api.get(f"/api/v1/jobs/{job_id}/events").json()
    return [str(e["message"]) for e in events if e["kind"] == kind]


def _committed(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    segments = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    return [seg for seg in segments if seg["state"] == "succeeded"]


def _downloads_intact(api: TestClient, job_id: str, step: int) -> bool:
    """Every file of the checkpoint at `step` downloads from Baton with its manifest's hash."""
    [checkpoint] = [
        c for c in api.get(f"/api/v1/jobs/{job_id}/checkpoints").json() if c["step"] == step
    ]
    for name, entry in checkpoint["manifest"]["files"].items():
        response = api.get(f"/api/v1/jobs/{job_id}/checkpoints/{step}/files/{name}")
        assert response.status_code == 200, response.text
        if hashlib.sha256(response.content).hexdigest() != entry["sha256"]:
            return False
    return True


def _on_kaggle(api: TestClient, job_id: str) -> list[bool]:
    return [c["on_kaggle"] for c in api.get(f"/api/v1/jobs/{job_id}/checkpoints").json()]


@pytest.mark.parametrize("kaggle", [KAGGLE, IN_KERNEL], ids=["through-orchestrator", "in-kernel"])
def test_a_job_moved_kaggle_local_kaggle_ends_on_the_uninterrupted_digest(
    tmp_path: Path, kaggle: dict[str, Any]
) -> None:
    spec = _spec(kaggle)
    with _submitted(tmp_path, spec, make_settings(tmp_path / "data")) as (api, emulator, job_id):
        wait_for(api, job_id, lambda job: job["state"] == "running", timeout=60)
        assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
        # A running job cannot move: 409.
        conflict = api.post(f"/api/v1/jobs/{job_id}/move", json={"backend": "local"})
        assert conflict.status_code == 409, conflict.text
        wait_for(api, job_id, _paused, timeout=180)
        [first] = _committed(api, job_id)
        transport = first["timings"]["transport"]
        assert transport == ("kernel" if kaggle.get("enable_internet") else "orchestrator")

        # Off Kaggle: a checkpoint that stayed on Kaggle is fetched first, every file verified.
        moved = api.post(f"/api/v1/jobs/{job_id}/move", json={"backend": "local"})
        assert moved.status_code == 200, moved.text
        assert moved.json()["spec"]["backend"] == "local"
        assert len(_messages(api, job_id, "checkpoint_fetched")) == (transport == "kernel")
        pushes = sum(emulator.push_counts.values())
        assert api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
        wait_for(api, job_id, lambda job: job["state"] == "running", timeout=60)
        assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
        wait_for(api, job_id, _paused, timeout=180)
        assert sum(emulator.push_counts.values()) == pushes  # nothing ran on Kaggle

        back = api.post(f"/api/v1/jobs/{job_id}/move", json={"backend": "kaggle", "kaggle": kaggle})
        assert back.status_code == 200, back.text
        assert api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
        job = wait_finished(api, job_id, timeout=300)
        assert job["state"] == "succeeded", job
        committed = _committed(api, job_id)
        # The final model ran on Kaggle; it is on this machine, whichever the transport.
        assert _downloads_intact(api, job_id, 15)
        moves = _messages(api, job_id, "moved")

    assert sum(emulator.push_counts.values()) > pushes  # the end ran on Kaggle again
    # (A kernel with internet hears the pause at once: it may stop before step 5.)
    assert moves[:1] == [f"moved from kaggle to local; continues from step {first['end_step']}"]
    assert committed[-1]["end_step"] == 15
    if transport == "kernel":
        # The final checkpoint was fetched once, and counted as the orchestrator's link bytes.
        files = committed[-1]["checkpoint"]["files"].values()
        assert committed[-1]["timings"]["link_bytes"] >= sum(entry["bytes"] for entry in files)
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == _uninterrupted(spec, tmp_path / "reference")


def test_a_checkpoint_left_on_kaggle_downloads_through_baton_and_the_job_goes_on(
    tmp_path: Path,
) -> None:
    spec = _spec(IN_KERNEL)
    spec["config"]["random_state_bytes"] = 2 * MB  # a checkpoint larger than any metadata
    with _submitted(tmp_path, spec, make_settings(tmp_path / "data")) as (api, emulator, job_id):
        wait_for(api, job_id, lambda job: job["state"] == "running", timeout=60)
        assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
        wait_for(api, job_id, _paused, timeout=180)
        # Only a stub is here: the first file asked for fetches the checkpoint, verified.
        [first] = _committed(api, job_id)
        assert first["timings"]["transport"] == "kernel"
        assert _on_kaggle(api, job_id) == [True]
        assert _downloads_intact(api, job_id, first["end_step"])
        assert _on_kaggle(api, job_id) == [False]
        assert len(_messages(api, job_id, "checkpoint_fetched")) == 1
        uploaded = emulator.link_counters("orchestrator").uploaded
        assert api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
        job = wait_finished(api, job_id, timeout=300)
        assert job["state"] == "succeeded", job
        committed = _committed(api, job_id)

    # The next session mounted the version its predecessor published: nothing sent again.
    assert emulator.link_counters("orchestrator").uploaded - uploaded < MB
    assert committed[-1]["end_step"] == 15
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == _uninterrupted(spec, tmp_path / "reference")


def test_a_job_whose_kaggle_quota_runs_out_continues_locally_where_allowed(
    tmp_path: Path,
) -> None:
    spec = _spec({**IN_KERNEL, "on_quota_exhausted": "local"})
    settings = make_settings(tmp_path / "data", allow_local_fallback=True)
    with _submitted(tmp_path, spec, settings) as (api, emulator, job_id):
        wait_for(api, job_id, lambda job: job["state"] == "running", timeout=60)
        assert api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
        wait_for(api, job_id, _paused, timeout=180)
        # The week's GPU quota is spent: the job would park until Kaggle's refresh.
        emulator.set_gpu_allowance(0)
        pushes = sum(emulator.push_counts.values())
        assert api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
        job = wait_finished(api, job_id, timeout=300)
        assert job["state"] == "succeeded", job
        assert job["backend"] == "local"
        committed = _committed(api, job_id)
        moves = _messages(api, job_id, "moved")
        fetched = _messages(api, job_id, "checkpoint_fetched")

    assert sum(emulator.push_counts.values()) == pushes  # nothing more ran on Kaggle
    [move] = moves
    assert move.startswith("moved from kaggle to local: its Kaggle quota is spent")
    step = committed[0]["end_step"]
    assert move.endswith(f"kaggle.on_quota_exhausted is local; continues from step {step}")
    assert len(fetched) == 1  # the stub's checkpoint, fetched from Kaggle before the move
    assert committed[0]["timings"]["transport"] == "kernel"
    assert committed[-1]["end_step"] == 15
    final = committed[-1]["checkpoint"]["model_digest"]
    assert final == _uninterrupted(spec, tmp_path / "reference")


def test_continuing_locally_needs_the_operators_leave(tmp_path: Path) -> None:
    spec = _spec({**KAGGLE, "on_quota_exhausted": "local"})
    with running_api(make_settings(tmp_path / "data"), embedded_loop=False) as api:
        api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
        response = api.post("/api/v1/jobs", json=spec)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "kaggle", "on_quota_exhausted"]
    assert "BATON_ALLOW_LOCAL_FALLBACK" in error["msg"]
