"""The compose process layout without containers: API, two Celery workers and beat as real
processes on PostgreSQL and Redis drive a local job and a Kaggle-emulator job to the end."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from tests.factories import FINISHED, job_spec, kaggle_spec
from tests.scale.cluster import REPO_ROOT
from tests.scale.conftest import ScaleRig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Sessions long enough for Python and torch to start on a loaded 2-core machine.
SESSION = {"limit_seconds": 30, "margin": {"k_steps": 2.0, "safety_seconds": 1.0}}
LOCAL = job_spec(name="scale-local", total_steps=500, config={"step_sleep": 0.04}, session=SESSION)
KAGGLE = kaggle_spec(name="scale-kaggle", total_steps=500, session=SESSION)


def wait_all_finished(client: httpx.Client, job_ids: list[str], timeout: float) -> list[Any]:
    deadline = time.monotonic() + timeout
    while True:
        jobs = [client.get(f"/api/v1/jobs/{job_id}").json() for job_id in job_ids]
        if all(job["state"] in FINISHED for job in jobs):
            return jobs
        if time.monotonic() > deadline:
            raise AssertionError(f"not finished in {timeout:g} s: {jobs}")
        time.sleep(0.3)


def test_api_workers_and_beat_drive_local_and_kaggle_jobs(rig: ScaleRig) -> None:
    with rig.cluster.client() as client:
        stored = client.put(
            "/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"}
        )
        assert stored.status_code == 200, stored.text
        local = client.post("/api/v1/jobs", json=LOCAL).json()["id"]
        kaggle = client.post("/api/v1/jobs", json=KAGGLE).json()["id"]
        try:
            jobs = wait_all_finished(client, [local, kaggle], timeout=400)
        except AssertionError:
            print(rig.cluster.log_tail())
            raise
        outcome = [(job["state"], job["reason"]) for job in jobs]
        if outcome != [("succeeded", None)] * 2:
            segments = [client.get(f"/api/v1/jobs/{job['id']}/segments").json() for job in jobs]
            errors = [(seg["index"], seg["state"], seg["error"]) for s in segments for seg in s]
            raise AssertionError(f"{outcome}\n{errors}\n{rig.cluster.log_tail()}")
        metrics = client.get("/metrics").text
    assert 'baton_jobs{state="succeeded"} 2.0' in metrics

    # The documented operator view (README): both workers answer `celery inspect ping`.
    env = {**rig.cluster.env}
    ping = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "orchestrator.tasks", "inspect", "ping"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ping.returncode == 0, ping.stderr
    host = os.uname().nodename
    assert f"w1@{host}" in ping.stdout
    assert f"w2@{host}" in ping.stdout
