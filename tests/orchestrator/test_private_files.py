"""Nothing Baton writes can be read by other local users: the data dir is 0700, files 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from orchestrator.config import Settings
from orchestrator.service import prestart
from tests.factories import job_spec, wait_finished, wait_for

OPEN_TO_OTHERS = stat.S_IRWXG | stat.S_IRWXO


def _readable_by_others(root: Path) -> list[str]:
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & OPEN_TO_OTHERS:
            found.append(f"{path.relative_to(root)} {stat.filemode(mode)}")
    return found


def test_a_chained_job_leaves_nothing_readable_by_others(
    live_api: TestClient, settings: Settings
) -> None:
    spec = job_spec(total_steps=120, config={"step_sleep": 0.03})
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]

    def running(job: dict[str, Any]) -> bool:
        segments = live_api.get(f"/api/v1/jobs/{job_id}/segments").json()
        return bool(segments) and segments[-1]["state"] == "running"

    # Pause and resume: two real sessions and two checkpoints, whatever the machine's speed.
    wait_for(live_api, job_id, running, timeout=120)
    assert live_api.post(f"/api/v1/jobs/{job_id}/pause").status_code == 200
    wait_for(live_api, job_id, lambda job: job["state"] == "paused", timeout=120)
    assert live_api.post(f"/api/v1/jobs/{job_id}/resume").status_code == 200
    assert wait_finished(live_api, job_id)["state"] == "succeeded"
    assert len(live_api.get(f"/api/v1/jobs/{job_id}/segments").json()) == 2

    data = settings.data_dir
    assert (data / "baton.db").exists()
    assert list(settings.checkpoints_dir.rglob("*.pt"))
    assert list(settings.sessions_dir.rglob("log.txt"))
    assert _readable_by_others(data) == []


def test_an_existing_data_dir_is_made_private_at_start(settings: Settings) -> None:
    settings.data_dir.mkdir(parents=True)
    settings.data_dir.chmod(0o755)
    old_log = settings.sessions_dir / "old" / "log.txt"
    old_log.parent.mkdir(parents=True, mode=0o755)
    old_log.write_text("a log written before this version\n")
    old_log.chmod(0o644)
    umask = os.umask(0o022)
    try:
        prestart(settings)
        assert _readable_by_others(settings.data_dir) == []
        assert stat.S_IMODE(settings.data_dir.stat().st_mode) == 0o700
    finally:
        os.umask(umask)
