"""The `slurm:` block at submit: extra sbatch options only from the allow-list, resources in
Slurm's own forms, and a walltime Slurm can express; anything else is a 422 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.spec import JobSpec, SlurmSpec
from tests.factories import job_spec


def _submit(api: TestClient, slurm: dict[str, Any], **overrides: Any) -> Any:
    return api.post("/api/v1/jobs", json=job_spec(backend="slurm", slurm=slurm, **overrides))


def test_a_slurm_job_is_accepted_with_its_options(api: TestClient) -> None:
    slurm = {
        "partition": "gpu",
        "account": "lab-1",
        "gres": "gpu:a100:2",
        "cpus": 8,
        "mem": "64G",
        "sbatch_options": ["--constraint=a100", "--exclusive"],
    }
    response = _submit(api, slurm)
    assert response.status_code == 201, response.text
    assert response.json()["spec"]["slurm"] == slurm | {"qos": None}


@pytest.mark.parametrize(
    "option", ["--time=10", "--wrap=rm -rf ~", "--export=ALL", "--output=/etc/passwd", "-t 5"]
)
def test_an_sbatch_option_off_the_allow_list_gets_422_naming_the_field(
    api: TestClient, option: str
) -> None:
    response = _submit(api, {"sbatch_options": [option]})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"][-2:] == ["slurm", "sbatch_options"]
    assert "--constraint" in error["msg"]  # names what is allowed


def test_an_allowed_option_with_a_shell_metacharacter_is_refused() -> None:
    with pytest.raises(ValueError, match="--constraint"):
        SlurmSpec.model_validate({"sbatch_options": ["--constraint=a100;reboot"]})


@pytest.mark.parametrize(
    ("field", "value"),
    [("gres", "gpu 2"), ("mem", "lots"), ("partition", "a b"), ("cpus", 0)],
)
def test_resources_in_other_forms_get_422_naming_the_field(
    api: TestClient, field: str, value: Any
) -> None:
    response = _submit(api, {field: value})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert field in error["loc"]


def test_a_walltime_under_a_minute_gets_422_naming_the_limit(api: TestClient) -> None:
    response = _submit(api, {}, session={"limit_seconds": 30})
    assert response.status_code == 422
    (error,) = response.json()["detail"]
    assert error["loc"][-2:] == ["session", "limit_seconds"]
    assert "minutes" in error["msg"]


def test_slurm_options_need_the_slurm_backend() -> None:
    with pytest.raises(ValueError, match="backend: slurm"):
        JobSpec.model_validate(job_spec(slurm={"cpus": 2}))
