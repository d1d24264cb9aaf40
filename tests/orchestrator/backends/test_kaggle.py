"""Jobs on the Kaggle backend, through the official client, against the Kaggle API emulator."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.backends.kaggle.backend import dataset_slug, kernel_slug
from orchestrator.reference import run_uninterrupted
from orchestrator.spec import JobSpec
from tests.factories import kaggle_spec, wait_finished
from tests.kaggle_emulator import Emulator

pytestmark = pytest.mark.slow


def _segments(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    return segments


def test_kaggle_job_chains_kernels_to_the_local_digest(
    kaggle_api: TestClient, emulator: Emulator, tmp_path: Path
) -> None:
    spec = kaggle_spec()
    job_id = kaggle_api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_finished(kaggle_api, job_id, timeout=300)
    assert job["state"] == "succeeded", job

    segments = _segments(kaggle_api, job_id)
    assert len(segments) >= 3
    assert all(seg["state"] == "succeeded" for seg in segments)
    for before, after in pairwise(segments):
        assert after["start_step"] == before["end_step"]
    assert segments[-1]["end_step"] == 400

    kernel = f"alice/{kernel_slug(job_id)}"
    assert emulator.push_counts[kernel] == len(segments)
    # Every segment after the first mounted the previous segment's checkpoint version.
    dataset = emulator.dataset(f"alice/{dataset_slug(job_id)}")
    assert dataset is not None
    assert len(dataset.versions) == len(segments) - 1

    local = spec | {"backend": "local", "kaggle": None}
    del local["kaggle"]
    reference = run_uninterrupted(JobSpec.model_validate(local), tmp_path / "reference")
    assert reference.manifest is not None
    assert segments[-1]["checkpoint"]["model_digest"] == reference.manifest.model_digest
