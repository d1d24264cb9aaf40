"""Submitting a job runs none of its code in the server: the trainer is read, never imported."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from fastapi.testclient import TestClient

from tests.factories import job_spec, make_settings, running_api

# The red team's strings: each imported something, ran code, or was accepted and failed later.
HOSTILE_TRAINERS = [
    "this.x:Y",  # prints the Zen of Python on import
    "trainers.tiny_lm.:X",  # imported torch into the server
    "trainers.tiny_lm.x:Y",
    "worker.__main__.x:Y",  # ran the worker's main()
    "venv.__main__.x:Y",  # creates a virtualenv
    "antigravity.x:Y",  # opens a web browser
    "subprocess:Popen",
    "subprocess:run",
    "shutil:rmtree",
    "os:system",
    "builtins:eval",
    "worker.trainer:Trainer",
    "trainers.__init__:TinyCharLM",
    "loud.__main__.x:Y",
    "loud.__main__:Y",
    "loud.m.x:Y",
    "loud:Missing",
    "loud.m:NotATrainer",
    "loud.m:run",
]


@pytest.fixture
def loud_package(tmp_path: Path) -> Path:
    """A trainer package whose every module writes a file when imported."""
    root = tmp_path / "trainer-code"
    package = root / "loud"
    package.mkdir(parents=True)
    fired = tmp_path / "imported"
    side_effect = f"open({str(fired)!r}, 'a').write(__name__ + '\\n')\n"
    (package / "__init__.py").write_text(side_effect)
    (package / "__main__.py").write_text(side_effect)
    (package / "m.py").write_text(
        side_effect + "from worker import Trainer\n\n"
        "class Loud(Trainer):\n    pass\n\n"
        "class NotATrainer:\n    pass\n\n"
        "def run():\n    pass\n"
    )
    return root


@pytest.fixture
def client(tmp_path: Path, loud_package: Path) -> Iterator[TestClient]:
    settings = make_settings(tmp_path / "data", trainer_paths=str(loud_package))
    with running_api(settings, embedded_loop=False) as api:
        yield api


def test_hostile_trainers_get_422_without_importing_anything(
    client: TestClient, tmp_path: Path
) -> None:
    # Warm up the request path so that only what a trainer check would import shows up below.
    assert client.post("/api/v1/jobs", json=job_spec(trainer="loud.nope:X")).status_code == 422
    modules = set(sys.modules)
    process = psutil.Process()
    rss = process.memory_info().rss

    for trainer in HOSTILE_TRAINERS:
        response = client.post("/api/v1/jobs", json=job_spec(trainer=trainer))
        assert response.status_code == 422, (trainer, response.text)
        assert response.json()["detail"][0]["loc"] == ["body", "trainer"], trainer

    assert set(sys.modules) - modules == set()
    # Importing torch alone adds about 200 MB.
    assert process.memory_info().rss - rss < 30 * 1024 * 1024
    assert not (tmp_path / "imported").exists()


def test_a_valid_trainer_is_accepted_without_being_imported(
    client: TestClient, tmp_path: Path
) -> None:
    response = client.post("/api/v1/jobs", json=job_spec(trainer="loud.m:Loud"))
    assert response.status_code == 201, response.text
    assert "loud" not in sys.modules
    assert not (tmp_path / "imported").exists()


def test_only_allowed_packages_may_be_named(tmp_path: Path) -> None:
    settings = make_settings(tmp_path / "data", trainer_packages="trainers")
    with running_api(settings, embedded_loop=False) as api:
        refused = api.post("/api/v1/jobs", json=job_spec())  # tests.support.trainers
        assert refused.status_code == 422
        assert "not allowed" in refused.json()["detail"][0]["msg"]
        demo = api.post("/api/v1/jobs", json=job_spec(trainer="trainers.tiny_lm:TinyCharLM"))
        assert demo.status_code == 201, demo.text
