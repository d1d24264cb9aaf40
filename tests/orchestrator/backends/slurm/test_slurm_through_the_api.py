"""`backend: slurm` through the REST API and the service's own wiring (orchestrator/service.py):
the server submits to Slurm with the commands of its host and collects the committed job."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Settings
from tests.factories import job_spec, make_settings, running_api, wait_finished
from tests.support.slurm import SlurmCluster
from worker.boundary.paths import SessionPaths


def test_a_slurm_job_submitted_to_the_api_runs_on_the_cluster(
    slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server's Slurm commands read SLURM_CONF from its environment, as on a login node.
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    settings: Settings = make_settings(tmp_path / "data", slurm_poll_seconds=0.5)
    spec = job_spec(
        backend="slurm",
        total_steps=30,
        config={"step_sleep": 0.05},
        session={"limit_seconds": 60},
        slurm={"cpus": 1},
    )
    with running_api(settings) as api:
        response = api.post("/api/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job = wait_finished(api, response.json()["id"], timeout=300)
        segments = api.get(f"/api/v1/jobs/{job['id']}/segments").json()
    assert job["state"] == "succeeded", job
    assert [s["outcome"] for s in segments] == ["completed"]
    # The session ran from the configured sessions directory, under Slurm.
    (session,) = (settings.resolved_slurm_sessions_dir).iterdir()
    assert "Slurm job" in SessionPaths(session).log.read_text()
