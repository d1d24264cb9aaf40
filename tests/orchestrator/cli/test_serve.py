"""`baton serve` binds its port before anything else: a second server whose port is taken exits
with one clear line and never touches a job."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from orchestrator.config import Settings
from tests.factories import ADMIN_TOKEN, job_spec


def test_a_taken_port_stops_serve_before_its_reconcile_loop_starts(
    api: TestClient, settings: Settings
) -> None:
    job_id = api.post("/api/v1/jobs", json=job_spec()).json()["id"]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **os.environ,
            "BATON_DATA_DIR": str(settings.data_dir),
            "BATON_ADMIN_TOKEN": ADMIN_TOKEN,
        }
        baton = Path(sys.executable).parent / "baton"
        ran = subprocess.run(
            [str(baton), "serve", "--port", str(port)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert ran.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in ran.stderr + ran.stdout
    assert "Traceback" not in ran.stderr
    job = api.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "queued"
    assert api.get(f"/api/v1/jobs/{job_id}/segments").json() == []
