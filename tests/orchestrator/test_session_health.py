"""Jobs whose sessions go bad. A loss gone NaN: the session stops without committing, and the
job fails naming the last good checkpoint, or (on_divergence: rollback) resumes from it once
with another data-order seed and says so. A hung step: the watchdog ends the session, and the
retry resumes from the last commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest
from fastapi.testclient import TestClient

from orchestrator.cli.render import steps
from orchestrator.config import Settings
from orchestrator.webhooks import notifies
from orchestrator.wire import JobSummary
from tests.factories import event_kinds, job_spec, reference_digest, wait_finished, wait_for

pytestmark = pytest.mark.slow

REASON = "diverged at step 7; last good checkpoint at step 5"


def nan_job(tmp_path: Path, on_divergence: str) -> dict[str, Any]:
    # Sessions of 5 steps (the trainer stops itself): segment 0 commits step 5, segment 1's
    # steps 7, 8 and 9 are NaN. With a marker the fault fires in one segment only.
    config = {"stop_every_steps": 5, "nan_from_step": 7, "fault_marker": str(tmp_path / "nan")}
    watchdog = {"divergence_steps": 3, "on_divergence": on_divergence}
    return job_spec(
        total_steps=12,
        config=config,
        session={"limit_seconds": 120, "watchdog": watchdog},
    )


def segments(api: TestClient, job_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.get(f"/api/v1/jobs/{job_id}/segments").json()
    return found


def test_a_diverged_job_fails_naming_its_last_good_checkpoint(
    live_api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    job_id = live_api.post("/api/v1/jobs", json=nan_job(tmp_path, "fail")).json()["id"]
    job = wait_finished(live_api, job_id)
    assert (job["state"], job["reason"], job["steps_done"]) == ("failed", REASON, 5)
    found = segments(live_api, job_id)
    # Failed at once: retrying the same data order would diverge again.
    assert [(s["state"], s["outcome"]) for s in found] == [
        ("succeeded", "stopped"),
        ("failed", "diverged"),
    ]
    # Nothing after the last good checkpoint was committed.
    assert [p.name for p in (settings.checkpoints_dir / job_id).iterdir()] == ["00000"]
    assert "diverged" in event_kinds(live_api, job_id)
    # `baton resume` starts again from step 5.
    assert live_api.post(f"/api/v1/jobs/{job_id}/resume").json()["state"] == "queued"
    resumed = wait_finished(live_api, job_id)
    assert resumed["state"] == "succeeded", resumed
    assert segments(live_api, job_id)[2]["start_step"] == 5


def session_seeds(settings: Settings, job_id: str) -> list[int]:
    """The seed each of the job's sessions ran with, by segment index (their segment.json)."""
    specs = [json.loads(path.read_text()) for path in settings.sessions_dir.glob("*/segment.json")]
    mine = sorted(
        (spec["segment_index"], spec["seed"]) for spec in specs if spec["job_id"] == job_id
    )
    return [seed for _, seed in mine]


def test_rollback_resumes_once_from_the_last_good_checkpoint_with_another_seed(
    live_api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    job_id = live_api.post("/api/v1/jobs", json=nan_job(tmp_path, "rollback")).json()["id"]
    job = wait_finished(live_api, job_id)
    assert job["state"] == "succeeded", job
    found = segments(live_api, job_id)
    assert [s["outcome"] for s in found[:2]] == ["stopped", "diverged"]
    assert found[2]["start_step"] == 5
    events = live_api.get(f"/api/v1/jobs/{job_id}/events").json()
    rolled = [e for e in events if e["kind"] == "rolled_back"]
    assert len(rolled) == 1
    assert rolled[0]["message"].startswith(REASON)
    assert "different data-order seed" in rolled[0]["message"]
    # The job's seed is 7: every session after the rollback runs with another one.
    seeds = session_seeds(settings, job_id)
    assert len(seeds) == len(found)
    assert seeds[:2] == [7, 7]
    assert set(seeds[2:]) == {8}


def test_a_hung_session_ends_and_the_job_completes_from_the_last_commit(
    live_api: TestClient, tmp_path: Path
) -> None:
    # Sessions of 4 steps; step 7 (index 6) blocks forever, once. The bound is the 3 s floor,
    # far above a 0.05 s step on any machine.
    config = {
        "step_sleep": 0.05,
        "stop_every_steps": 4,
        "hang_at_step": 6,
        "fault_marker": str(tmp_path / "hung"),
    }
    spec = job_spec(
        total_steps=10,
        config=config,
        session={"limit_seconds": 300, "watchdog": {"hang_floor_seconds": 3.0}},
    )
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_finished(live_api, job_id)
    assert job["state"] == "succeeded", job
    found = segments(live_api, job_id)
    hung = found[1]
    assert (hung["state"], hung["start_step"]) == ("failed", 4)
    assert "hung: no step ended within 3 s after step 6" in hung["error"]
    log = live_api.get(f"/api/v1/jobs/{job_id}/segments/1/log").text
    assert "in train_step" in log  # every thread's stack, the hung one included
    assert found[2]["start_step"] == 4
    clean = job_spec(total_steps=10, config={"step_sleep": 0.05})
    assert found[-1]["checkpoint"]["model_digest"] == reference_digest(clean, tmp_path)


def test_a_frozen_session_shows_as_stalled(live_api: TestClient, settings: Settings) -> None:
    """The worker is frozen (SIGSTOP: its watchdog cannot act either). Once its heartbeat is
    older than the 3 s hang bound the job's progress says stalled, and one `stalled` event
    (which webhooks carry) names the segment."""
    spec = job_spec(
        total_steps=100_000,
        config={"step_sleep": 0.05},
        session={"limit_seconds": 600, "watchdog": {"hang_floor_seconds": 3.0}},
    )
    job_id = live_api.post("/api/v1/jobs", json=spec).json()["id"]
    job = wait_for(
        live_api, job_id, lambda job: (job.get("progress") or {}).get("step", 0) > 0, timeout=120
    )
    assert job["progress"]["stalled"] is False
    # (One word of its command line: a warm-started session's is one string, its title.)
    worker = next(p for p in session_processes(settings) if "worker" in command_words(p))
    worker.suspend()
    try:
        stalled = wait_for(live_api, job_id, lambda job: job["progress"]["stalled"], timeout=60)
        assert stalled["state"] == "running"
        # The CLI's steps column says so, and the event is one that webhooks carry.
        assert "stalled" in steps(JobSummary.model_validate(stalled))
        assert notifies("stalled", 0, None, None)
        wait_for(live_api, job_id, lambda _: "stalled" in event_kinds(live_api, job_id), timeout=60)
        events = live_api.get(f"/api/v1/jobs/{job_id}/events").json()
        noted = [e for e in events if e["kind"] == "stalled"]
        assert len(noted) == 1
        assert noted[0]["segment_index"] == 0
        assert noted[0]["message"].startswith("no heartbeat for ")
    finally:
        live_api.post(f"/api/v1/jobs/{job_id}/cancel")
        worker.resume()


def command_words(process: psutil.Process) -> list[str]:
    return " ".join(process.cmdline()).split()


def session_processes(settings: Settings) -> list[psutil.Process]:
    """Live processes working in one of the sessions' directories."""
    roots = {str(path) for path in settings.sessions_dir.iterdir()}
    found = []
    for process in psutil.process_iter():
        try:
            if process.cwd() in roots:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
