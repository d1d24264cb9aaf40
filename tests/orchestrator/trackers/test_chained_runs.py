"""A chained job's metrics in each tracker, read back with the tracker's own reader: one run,
one point per step over all sessions, no gap and no duplicate, though one session trained two
steps past its last commit before failing and the retry trained them again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.config import Settings
from orchestrator.trackers.writers import mlflow_store_uri
from tests.factories import (
    event_kinds,
    job_spec,
    kaggle_spec,
    make_settings,
    running_api,
    wait_finished,
)
from tests.kaggle_emulator import start_emulator

pytestmark = pytest.mark.slow

STEPS = 12
ALL_STEPS = list(range(1, STEPS + 1))


def chained_job(tmp_path: Path) -> dict[str, Any]:
    # Sessions of 4 steps (the trainer stops itself), every step logged. The second session
    # trains steps 5 and 6 past its commit at step 4, then fails when step 7 begins (once).
    config = {
        "stop_every_steps": 4,
        "log_every": 1,
        "fail_at_step": 6,
        "fault_marker": str(tmp_path / "failed-once"),
    }
    trackers = {
        "tensorboard": True,
        "wandb": {"project": "baton-test", "mode": "offline"},
        "mlflow": True,
    }
    return job_spec(
        total_steps=STEPS, config=config, trackers=trackers, session={"limit_seconds": 120}
    )


def tensorboard_loss(logdir: Path) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # Without purging: a step written twice, or written again lower, shows as it is.
    accumulator = EventAccumulator(str(logdir), purge_orphaned_data=False)
    accumulator.Reload()
    return [(event.step, event.value) for event in accumulator.Scalars("loss")]


def wandb_loss(wandb_dir: Path, run_id: str) -> list[tuple[int, float]]:
    """Every history record of the run's offline transaction logs, in the order they were
    written, through `wandb leet inspect --json` (wandb's reader of its .wandb files)."""
    files = sorted(wandb_dir.rglob(f"run-{run_id}.wandb"))
    assert files
    points = []
    for path in files:
        inspected = subprocess.run(
            [str(Path(sys.executable).parent / "wandb"), "leet", "inspect", "--json", str(path)],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        for line in inspected.stdout.splitlines():
            record = json.loads(line)
            if record.get("type") == "history":
                points.extend(history_loss(record))
    return points


def history_loss(record: dict[str, Any]) -> list[tuple[int, float]]:
    items = record["history"]["item"]
    return [(int(items["_step"]), float(items["loss"]))] if "loss" in items else []


def mlflow_loss(store: Path, job_id: str) -> tuple[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_store_uri(store))
    experiment = client.get_experiment_by_name("baton")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert [run.data.tags["baton.job_id"] for run in runs] == [job_id]
    history = client.get_metric_history(runs[0].info.run_id, "loss")
    return runs[0].info.status, sorted((m.step, m.value) for m in history)


def test_each_tracker_holds_one_unbroken_run_over_all_sessions(
    live_api: TestClient, settings: Settings, tmp_path: Path
) -> None:
    job_id = live_api.post("/api/v1/jobs", json=chained_job(tmp_path)).json()["id"]
    job = wait_finished(live_api, job_id)
    assert job["state"] == "succeeded", job
    segments = live_api.get(f"/api/v1/jobs/{job_id}/segments").json()
    assert [(s["state"], s["start_step"]) for s in segments] == [
        ("succeeded", 0),
        ("failed", 4),
        ("succeeded", 4),
        ("succeeded", 8),
    ]
    # The failed session did train past its last commit: its log shows step 6.
    assert "step 6/12" in live_api.get(f"/api/v1/jobs/{job_id}/segments/1/log").text
    assert "tracker_failed" not in event_kinds(live_api, job_id)
    served = [
        (point["step"], point["values"]["loss"])
        for point in live_api.get(f"/api/v1/jobs/{job_id}/metrics").json()
    ]
    assert [step for step, _ in served] == ALL_STEPS

    root = settings.trackers_dir
    board = tensorboard_loss(root / "tensorboard" / f"test-job-{job_id}")
    assert [step for step, _ in board] == ALL_STEPS
    # TensorBoard keeps 32-bit floats.
    assert [value for _, value in board] == pytest.approx([value for _, value in served])

    wandb = wandb_loss(root / "wandb", f"baton-{job_id}")
    assert wandb == served

    status, mlflow = mlflow_loss(root / "mlflow", job_id)
    assert mlflow == served
    assert status == "FINISHED"


def test_a_kaggle_job_s_sessions_write_one_tensorboard_run(tmp_path: Path) -> None:
    """The run lives on the orchestrator's side: Kaggle sessions (here the emulator's) feed it
    the same way local ones do, with no internet or key inside the kernel."""
    spec = kaggle_spec(
        {"accelerator": "t4x2", "quota_reserve_seconds": 0},
        total_steps=STEPS,
        config={"stop_every_steps": 4, "log_every": 1},
        trackers={"tensorboard": True},
        session={"limit_seconds": 120, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    settings = make_settings(tmp_path / "data")
    with (
        start_emulator(
            tmp_path / "kaggle", queue_seconds=0.2, dataset_processing_seconds=0.5
        ) as emulator,
        running_api(settings, kaggle_url=emulator.url) as api,
    ):
        api.put("/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"})
        job_id = api.post("/api/v1/jobs", json=spec).json()["id"]
        job = wait_finished(api, job_id, timeout=300)
        assert job["state"] == "succeeded", job
        assert len(api.get(f"/api/v1/jobs/{job_id}/segments").json()) == 3
        served = [
            (point["step"], point["values"]["loss"])
            for point in api.get(f"/api/v1/jobs/{job_id}/metrics").json()
        ]
    board = tensorboard_loss(settings.trackers_dir / "tensorboard" / f"test-job-{job_id}")
    assert [step for step, _ in board] == ALL_STEPS
    assert [value for _, value in board] == pytest.approx([value for _, value in served])
