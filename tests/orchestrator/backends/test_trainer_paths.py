"""A trainer from BATON_TRAINER_PATHS runs where submit found it: the local sessions' import path
starts with those directories, and a Kaggle kernel carries the package embedded."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from orchestrator.backends.kaggle.packaging import code_archive
from tests.factories import (
    guaranteed_segments,
    job_spec,
    kaggle_spec,
    make_settings,
    running_api,
    wait_finished,
)
from tests.kaggle_emulator import Emulator

TRAINER = "site_trainers.model:SiteTrainer"


@pytest.fixture
def trainer_dir(tmp_path: Path) -> Path:
    """An operator's trainer directory, on no import path of this process or of the emulator."""
    package = tmp_path / "operator-code" / "site_trainers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(
        "from tests.support.trainers import LinearTrainer\n\n\n"
        "class SiteTrainer(LinearTrainer):\n"
        '    """The test trainer, named from the operator\'s own package."""\n'
    )
    return package.parent


def test_the_kernel_code_embeds_the_package_from_the_trainer_paths(trainer_dir: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(code_archive(TRAINER, [trainer_dir]))) as archive:
        names = set(archive.getnames())
    assert {"site_trainers/__init__.py", "site_trainers/model.py"} <= names
    with pytest.raises(LookupError, match="site_trainers"):
        code_archive(TRAINER)  # not on this process's import path


@pytest.mark.slow
def test_a_local_job_chains_with_a_trainer_from_the_trainer_paths(
    tmp_path: Path, trainer_dir: Path
) -> None:
    settings = make_settings(tmp_path / "data", trainer_paths=str(trainer_dir))
    spec = job_spec(
        trainer=TRAINER,
        # 25 s of steps in 20 s sessions: two segments or more, on any machine.
        total_steps=500,
        config={"step_sleep": 0.05},
        session={"limit_seconds": 20, "margin": {"k_steps": 2.0, "safety_seconds": 0.5}},
    )
    with running_api(settings) as api:
        response = api.post("/api/v1/jobs", json=spec)
        assert response.status_code == 201, response.text
        job = wait_finished(api, response.json()["id"])
        segments = api.get(f"/api/v1/jobs/{job['id']}/segments").json()
    assert job["state"] == "succeeded", (job["reason"], segments)
    assert len([s for s in segments if s["state"] == "succeeded"]) >= guaranteed_segments(spec)


@pytest.mark.slow
def test_a_kaggle_job_runs_a_trainer_from_the_trainer_paths(
    tmp_path: Path, trainer_dir: Path, emulator: Emulator
) -> None:
    settings = make_settings(tmp_path / "data", trainer_paths=str(trainer_dir))
    with running_api(settings, kaggle_url=emulator.url) as api:
        stored = api.put(
            "/api/v1/credentials/kaggle", json={"username": "alice", "key": "alice-key"}
        )
        assert stored.status_code == 200, stored.text
        response = api.post("/api/v1/jobs", json=kaggle_spec(trainer=TRAINER, total_steps=100))
        assert response.status_code == 201, response.text
        job = wait_finished(api, response.json()["id"], timeout=300)
    assert job["state"] == "succeeded", job
    assert job["steps_done"] == 100
