"""A Kaggle job whose owner deleted the credentials, then cancelled it: its segment still ends,
within two looks, with an event saying what may still run."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from orchestrator.service import Services
from tests.factories import kaggle_spec, make_settings, running_api
from tests.kaggle_emulator import Emulator


def test_cancel_ends_the_segment_even_without_credentials(
    tmp_path: Path, emulator: Emulator
) -> None:
    settings = make_settings(tmp_path / "data")
    with running_api(settings, embedded_loop=False, kaggle_url=emulator.url) as api:
        engine = _services(api).engine
        api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
        job_id = api.post("/api/v1/jobs", json=kaggle_spec()).json()["id"]
        engine.reconcile_job(job_id)
        [segment] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
        assert segment["state"] == "running"

        assert api.delete("/api/v1/credentials/kaggle").status_code in (200, 204)
        assert api.post(f"/api/v1/jobs/{job_id}/cancel").json()["state"] == "cancelled"
        for _ in range(2):
            engine.reconcile_job(job_id)

        [segment] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
        events = api.get(f"/api/v1/jobs/{job_id}/events").json()
    assert segment["state"] == "abandoned"
    [abandoned] = [event for event in events if event["kind"] == "segment_abandoned"]
    assert "no Kaggle credentials" in abandoned["message"]
    assert "may still be running" in abandoned["message"]


def _services(api: TestClient) -> Services:
    services: Services = api.app.state.services  # type: ignore[attr-defined]
    return services
